"""Flower entry point of the ServerApp (see ``fedrec_flwr.server``)."""

from fedrec_flwr.server import app

__all__ = ["app"]
