"""DualPer, the plug-in that acts on a method's roles (PLGC, which wraps the method, is in
:mod:`fedrec_flwr.methods.plgc`): its key, its check and its declaration."""

from __future__ import annotations

from enum import StrEnum

from fedrec_flwr.methods.base import ROWS, Method, Role
from fedrec_flwr.methods.layout import forget as forget_layout
from fedrec_flwr.methods.plugin import Plugin
from fedrec_flwr.methods.registry import method_card
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import ConfigError, Group, key


class Personalization(StrEnum):
    """``personalization``: the method as published, or with DualPer."""

    NONE = "none"
    DUAL = "dual"


#: DualPer's key. Its checks: ``dual_applies``; no search space (a DualPer preset is tuned
#: as its base method's).
class DualKeys(Group):
    title = "DualPer (plug-in)"
    plugin = "dualper"

    personalization: str = key(
        default=Personalization.NONE.value,
        help="`none`: the method as published; `dual`: PFedRec's plug-in (Table 3) on "
        "`fedmf`, `fedncf`, `fedrecon`: the score function becomes private and the user "
        "post-tunes personal item rows that it evaluates with",
        choices=Personalization,
    )


def dual_enabled(config: RunGroups) -> bool:
    return config.group(DualKeys).personalization == Personalization.DUAL


def dual_applies(config: RunGroups, method: Method) -> None:
    """DualPer applies to a method whose card ``supports_dual``."""
    if not method_card(method.name).supports_dual:
        keeps_personal_rows = method.roles()[ROWS] is Role.PERSONAL_ROWS
        raise ConfigError(
            f"personalization='dual' does not apply to method '{method.name}'"
            + (" (it keeps personal item rows already)" if keeps_personal_rows else "")
            + "; use personalization='none'."
        )


def dual(config: RunGroups, num_items: int, method: Method) -> Method:
    """``method`` under dual personalisation (:attr:`Method.dual`: its dense parameters and
    score function private, its item rows personal, the private phase first)."""
    method.dual = True
    forget_layout(method)  # the roles follow the flag: a layout read before it is stale
    return method


#: PFedRec's dual personalisation on another method: private score function first, then
#: post-tuned personal item rows.
DUALPER = Plugin(
    name="dualper",
    paper="PFedRec Table 3 (Zhang et al., IJCAI 2023)",
    enabled=dual_enabled,
    check=dual_applies,
    method=dual,
    keys=(DualKeys,),
    presets=("dual",),
)
