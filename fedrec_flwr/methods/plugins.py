"""The plug-ins that are options of a method, the local update or the upload: DualPer, SAM,
LDP and decoys. They attach like PLGC (:mod:`fedrec_flwr.methods.plugin`): a declaration,
enabled by the run config and checked against the configured method; the code that carries
each one out reads its keys where it acts (``module``).
"""

from __future__ import annotations

from enum import StrEnum

from fedrec_flwr.methods.base import Method
from fedrec_flwr.methods.plugin import Attachment, Plugin
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
    return config.personalization == "dual"


def dual_applies(config: RunGroups, method: Method) -> None:
    """DualPer applies to a method whose card ``supports_dual``."""
    if not method_card(method.name).supports_dual:
        raise ConfigError(
            f"personalization='dual' does not apply to method '{method.name}'"
            + (" (it keeps personal item rows already)" if method.native_personal_rows else "")
            + "; use personalization='none'."
        )


def sam_enabled(config: RunGroups) -> bool:
    return config.sam_rho_private > 0 or config.sam_rho_shared > 0


def ldp_enabled(config: RunGroups) -> bool:
    return config.ldp_mechanism != "none" or config.ldp_laplace_lambda > 0


def ldp_applies(config: RunGroups, method: Method) -> None:
    """LDP clips and noises item rows only: a method that uploads shared-dense parameters
    (FedNCF's MLP, outside DualPer) would send them in the clear, so it is refused."""
    dense = method.shared_dense_names()
    if dense:
        raise ConfigError(
            f"LDP noises the uploaded item rows, but method '{method.name}' also uploads the "
            f"shared-dense parameters {', '.join(dense)}, which LDP does not clip or noise: "
            "use a method without shared-dense parameters (or personalization='dual', which "
            "keeps them on the device), or set ldp-mechanism='none' and ldp-laplace-lambda=0."
        )


def decoys_enabled(config: RunGroups) -> bool:
    return config.decoy_ratio > 0


#: PFedRec's dual personalisation on another method: private score function first, then
#: post-tuned personal item rows (``Method.dual``: its roles and phases).
DUALPER = Plugin(
    name="dualper",
    paper="PFedRec Table 3 (Zhang et al., IJCAI 2023)",
    attaches_to=Attachment.ROLES,
    enabled=dual_enabled,
    module="fedrec_flwr.methods.base",
    check=dual_applies,
)
#: Sharpness-aware local steps, one radius for private and one for shared parameters.
SAM = Plugin(
    name="sam",
    paper="Foret et al., ICLR 2021",
    attaches_to=Attachment.LOCAL_UPDATE,
    enabled=sam_enabled,
    module="fedrec_flwr.node.optim",
)
#: Clipped Laplace or Gaussian noise on each uploaded row, or PFedRec Table 4's raw Laplace;
#: refused for methods with shared-dense parameters (``ldp_applies``).
LDP = Plugin(
    name="ldp",
    paper="Laplace and Gaussian mechanisms; PFedRec Table 4",
    attaches_to=Attachment.UPLOAD,
    enabled=ldp_enabled,
    module="fedrec_flwr.privacy.ldp",
    check=ldp_applies,
)
#: A fixed set of never-interacted rows per user, uploaded beside its real rows.
DECOYS = Plugin(
    name="decoys",
    paper="decoy rows (README, privacy)",
    attaches_to=Attachment.UPLOAD,
    enabled=decoys_enabled,
    module="fedrec_flwr.privacy.decoys",
)
