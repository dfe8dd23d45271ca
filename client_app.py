"""Flower entry point of the ClientApp (see ``fedrec_flwr.client``)."""

from fedrec_flwr.client import app

__all__ = ["app"]
