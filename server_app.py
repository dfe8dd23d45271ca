"""The ServerApp component that Flower loads (``[tool.flwr.app.components]`` in
``pyproject.toml``); the app itself lives in the runtime package, :mod:`fedrec_flwr.server_app`."""

from fedrec_flwr.server_app import app

__all__ = ["app"]
