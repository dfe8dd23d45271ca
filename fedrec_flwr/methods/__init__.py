"""Method registry: name -> class. Adding a method: one module here, one entry, one preset."""

from __future__ import annotations

from fedrec_flwr.methods.base import Method, Step
from fedrec_flwr.methods.fedmf import FedMF
from fedrec_flwr.methods.pfedrec import PFedRec

METHODS: dict[str, type[Method]] = {cls.name: cls for cls in (PFedRec, FedMF)}

__all__ = ["METHODS", "FedMF", "Method", "PFedRec", "Step", "build_method"]


def build_method(config, num_items: int) -> Method:
    """Instantiate the configured method."""
    return METHODS[config.method](config, num_items)
