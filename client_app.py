"""The ClientApp component that Flower loads (``[tool.flwr.app.components]`` in
``pyproject.toml``); the app itself lives in the runtime package, :mod:`fedrec_flwr.client_app`."""

from fedrec_flwr.client_app import app

__all__ = ["app"]
