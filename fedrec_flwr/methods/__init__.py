"""Method registry: name -> class. Adding a method: one module here, one entry, its presets
and a README row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedrec_flwr.methods.base import ROWS, Method, Phase, Role, Stage, Step
from fedrec_flwr.methods.fedmf import FedMF
from fedrec_flwr.methods.fedncf import FedNCF, FedRecGEL
from fedrec_flwr.methods.fedrap import FedRAP
from fedrec_flwr.methods.fedrecon import FedRecon
from fedrec_flwr.methods.pfedrec import PFedRec
from fedrec_flwr.methods.plgc import PLGC

if TYPE_CHECKING:
    from fedrec_flwr.config import RunConfig

METHODS: dict[str, type[Method]] = {
    cls.name: cls for cls in (PFedRec, FedMF, FedNCF, FedRecon, FedRecGEL, FedRAP)
}

__all__ = [
    "METHODS",
    "PLGC",
    "ROWS",
    "FedMF",
    "FedNCF",
    "FedRAP",
    "FedRecGEL",
    "FedRecon",
    "Method",
    "PFedRec",
    "Phase",
    "Role",
    "Stage",
    "Step",
    "build_method",
]


def build_method(config: RunConfig, num_items: int) -> Method:
    """Instantiate the configured method, wrapped in PLGC when ``plgc = true`` (raises
    ConfigError for impossible combinations)."""
    method = METHODS[config.method](config, num_items)
    return PLGC(config, num_items, method) if config.plgc else method
