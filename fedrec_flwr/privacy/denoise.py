"""Server-side post-processing of the LDP noise in an aggregated row change (``ldp-denoise``):
the LDP plug-in's stage of the server's chain (:class:`Denoise`).

The server knows the noise's per-coordinate variance ``v`` (Gaussian ``sigma^2``, Laplace
``2 b^2``, PFedRec's raw mode ``2 lambda^2``) and how many uploads ``n_i`` each row's change
sums, so the noise in row ``i``'s aggregated change has variance ``n_i v / D_i^2`` per
coordinate (``D_i``: the rule's divisor, the number of users in the round for
``round-mean``). Each row's change is shrunk towards zero by the positive-part
James-Stein factor ``max(0, 1 - d n_i v / (D_i^2 ||change_i||^2))``: a row whose change is
mostly noise hardly moves. Post-processing costs no privacy; it trades noise for a bias
towards small steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.privacy.ldp import LdpKeys, noise_scale
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.stages import RowChanges, ServerStage


def noise_variance(config: RunGroups, dim: int) -> float:
    """Per-coordinate variance of the noise on one uploaded row (0: no noise)."""
    ldp = config.group(LdpKeys)
    if ldp.ldp_laplace_lambda > 0:
        return 2.0 * ldp.ldp_laplace_lambda**2
    if ldp.ldp_mechanism == "none":
        return 0.0
    scale = noise_scale(ldp.ldp_mechanism, ldp.ldp_epsilon, ldp.ldp_delta, ldp.ldp_clip, dim)
    return 2.0 * scale**2 if ldp.ldp_mechanism == "laplace" else scale**2


def denoised(
    touched: np.ndarray,
    change: np.ndarray,
    uploads: Sequence[RowUpload],
    config: RunGroups,
    num_items: int,
) -> np.ndarray:
    """``change`` (rows ``touched``) shrunk by the James-Stein factor above."""
    variance = noise_variance(config, change.shape[1])
    if variance == 0 or len(touched) == 0:
        return change
    total = np.zeros(num_items, dtype=np.float64)
    for upload in uploads:
        total[upload.item_ids] += upload.row_counts
        total[upload.zero_ids] += upload.zero_counts
    n = total[touched]
    users = float(sum(u.num_users for u in uploads))
    divisor = np.full(len(touched), users) if config.learning.aggregation == "round-mean" else n
    noise = change.shape[1] * n * variance / divisor**2
    energy = np.maximum((change**2).sum(axis=1), 1e-300)
    return change * np.maximum(0.0, 1.0 - noise / energy)[:, None]


#: (touched rows, their float64 change, the round's uploads) -> the change to apply.
Denoiser = Callable[[np.ndarray, np.ndarray, Sequence[RowUpload]], np.ndarray]


class Denoise(ServerStage):
    """The rows' change, as the rest of the chain computes it, passed through ``denoise``
    (the James-Stein shrinkage of :func:`denoised` for a run's LDP keys, or any
    :data:`Denoiser`)."""

    name = "ldp-denoise"

    def __init__(self, denoise: Denoiser) -> None:
        self.denoise = denoise

    @classmethod
    def of(cls, config: RunGroups, num_items: int) -> Denoise:
        """The shrinkage for the run's LDP keys and aggregation rule."""
        return cls(partial(denoised, config=config, num_items=num_items))

    def changes(
        self,
        table: np.ndarray,
        uploads: Sequence[RowUpload],
        call_next: Callable[[np.ndarray, Sequence[RowUpload]], RowChanges],
    ) -> RowChanges:
        touched, change = call_next(table, uploads)
        return touched, self.denoise(touched, change, uploads)
