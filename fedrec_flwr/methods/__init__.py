"""Methods and plug-ins, and their registry.

Registers the built-in methods and plug-ins; a method or plug-in defined elsewhere joins with
:func:`register_method` / :func:`register_plugin` (``docs/adding-a-method.md``).
"""

from __future__ import annotations

from fedrec_flwr.methods.base import ROWS, Method, Phase, Role, Stage, Step
from fedrec_flwr.methods.fedmf import FedMF
from fedrec_flwr.methods.fedncf import FedNCF, FedRecGEL
from fedrec_flwr.methods.fedrap import FedRAP
from fedrec_flwr.methods.fedrecon import FedRecon
from fedrec_flwr.methods.pfedrec import PFedRec
from fedrec_flwr.methods.plgc import PLGC
from fedrec_flwr.methods.plgc import PLUGIN as PLGC_PLUGIN
from fedrec_flwr.methods.plugin import Attachment, MethodPlugin, Plugin
from fedrec_flwr.methods.plugins import DECOYS, DUALPER, LDP, SAM
from fedrec_flwr.methods.registry import (
    METHODS,
    PLUGINS,
    build_method,
    enabled_plugins,
    register_method,
    register_plugin,
    unregister_method,
    unregister_plugin,
)

for _method in (PFedRec, FedMF, FedNCF, FedRecon, FedRecGEL, FedRAP):
    register_method(_method)
for _plugin in (DUALPER, SAM, PLGC_PLUGIN, LDP, DECOYS):
    register_plugin(_plugin)

__all__ = [
    "METHODS",
    "PLGC",
    "PLUGINS",
    "ROWS",
    "Attachment",
    "FedMF",
    "FedNCF",
    "FedRAP",
    "FedRecGEL",
    "FedRecon",
    "Method",
    "MethodPlugin",
    "PFedRec",
    "Phase",
    "Plugin",
    "Role",
    "Stage",
    "Step",
    "build_method",
    "enabled_plugins",
    "register_method",
    "register_plugin",
    "unregister_method",
    "unregister_plugin",
]
