"""Methods and plug-ins, and their registry.

Registers the built-in methods (every :class:`MethodCard` declared in a module of this
package); a method from another package joins through an entry point of the group
``fedrec_flwr.methods``, or :func:`register_method` (``docs/adding-a-method.md``). The
built-in plug-ins join the registry from their own modules
(:data:`~fedrec_flwr.methods.registry.BUILTIN_PLUGINS`); another joins through an entry
point of the group ``fedrec_flwr.plugins``, or :func:`register_plugin`
(``docs/adding-a-stage.md``).
"""

from __future__ import annotations

from fedrec_flwr.methods.base import ROWS, Method, Phase, Role, Stage, Step
from fedrec_flwr.methods.card import AuditImitation, MethodCard
from fedrec_flwr.methods.fedmf import FedMF
from fedrec_flwr.methods.fedncf import FedNCF, FedRecGEL
from fedrec_flwr.methods.fedrap import FedRAP
from fedrec_flwr.methods.fedrecon import FedRecon
from fedrec_flwr.methods.itemitem import ItemItem
from fedrec_flwr.methods.pfedrec import PFedRec
from fedrec_flwr.methods.plgc import PLGC
from fedrec_flwr.methods.plugin import PLACES, MethodPlugin, Plugin
from fedrec_flwr.methods.registry import (
    METHOD_ENTRY_POINTS,
    PLUGIN_ENTRY_POINTS,
    PLUGINS,
    build_method,
    enabled_plugins,
    method_card,
    methods,
    plugin_enabled,
    plugin_key_groups,
    register_builtin_methods,
    register_method,
    register_plugin,
    unregister_method,
    unregister_plugin,
)

register_builtin_methods()

__all__ = [
    "METHOD_ENTRY_POINTS",
    "PLACES",
    "PLGC",
    "PLUGINS",
    "PLUGIN_ENTRY_POINTS",
    "ROWS",
    "AuditImitation",
    "FedMF",
    "FedNCF",
    "FedRAP",
    "FedRecGEL",
    "FedRecon",
    "ItemItem",
    "Method",
    "MethodCard",
    "MethodPlugin",
    "PFedRec",
    "Phase",
    "Plugin",
    "Role",
    "Stage",
    "Step",
    "build_method",
    "enabled_plugins",
    "method_card",
    "methods",
    "plugin_enabled",
    "plugin_key_groups",
    "register_method",
    "register_plugin",
    "unregister_method",
    "unregister_plugin",
]
