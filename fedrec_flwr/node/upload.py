"""A node's upload chain (:class:`~fedrec_flwr.stages.UploadChain`), composed from the
plug-ins a run enables, and its default finisher: the sums over the node's users of their
uploaded item rows (ids, counts) and of their shared-dense parameters (:class:`PlainSum`,
:func:`summed_upload`). Secure aggregation finishes with one masked vector instead
(:mod:`fedrec_flwr.privacy.secure_upload`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fedrec_flwr.methods import enabled_plugins
from fedrec_flwr.node import host_loops
from fedrec_flwr.node.samples import distinct_items
from fedrec_flwr.privacy.uploads import ObservedUploads
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import ConfigError
from fedrec_flwr.stages import TrainResult, UploadChain, UploadRound, Uploads, UploadStage

__all__ = ["PlainSum", "TrainResult", "float64_row_sums", "summed_upload", "upload_chain"]

SUM_CHUNK = 1 << 16  # rows converted to float64 at a time by float64_row_sums
COMPILED_ROWS = 1 << 14  # rows from which float64_row_sums takes the compiled loop


def float64_row_sums(
    inverse: np.ndarray,
    rows: np.ndarray | torch.Tensor,
    num_out: int,
    min_rows: int = COMPILED_ROWS,
) -> torch.Tensor:
    """``out[inverse[k]] += rows[k]`` in float64, in row order, a chunk at a time (the same
    sums as one ``index_add_`` without a float64 copy of the whole flat table), on the
    rows' device. Float32 rows on the host: the compiled loop
    (:func:`fedrec_flwr.node.host_loops.float64_row_sums`, the same additions in the same
    order) where there are at least ``min_rows``."""
    source = rows if isinstance(rows, torch.Tensor) else torch.from_numpy(rows)
    if source.device.type == "cpu" and source.dtype == torch.float32 and len(source) >= min_rows:
        return torch.from_numpy(host_loops.float64_row_sums(inverse, source.numpy(), num_out))
    sums = torch.zeros((num_out, source.shape[1]), dtype=torch.float64, device=source.device)
    index = torch.from_numpy(inverse).to(source.device)
    for lo in range(0, len(source), SUM_CHUNK):
        sums.index_add_(0, index[lo : lo + SUM_CHUNK], source[lo : lo + SUM_CHUNK].double())
    return sums


def summed_upload(
    items: np.ndarray,
    rows: torch.Tensor,
    num_items: int,
    dense: Mapping[str, torch.Tensor],
    *,
    num_users: int,
    num_samples: int,
    loss_sum: float,
    sparse: bool,
) -> TrainResult:
    """The upload of ``num_users`` users from their flat ``rows`` of ``items`` (the rows of
    one item are summed) and their shared-dense tensors ``dense`` (``[users, ...]`` each).

    One user: its float32 values as they are; several: exact float64 sums, so the server's
    aggregate does not depend on how users are packed into nodes. ``sparse`` (the method has
    a zero threshold): rows whose sum is zero travel as ids only (``zero_ids``)."""
    item_ids, inverse = distinct_items(items, num_items)
    counts = np.bincount(inverse, minlength=len(item_ids)).astype(np.int64)
    one = num_users == 1
    if one:
        row_sums = rows.detach().cpu().numpy()
    else:
        row_sums = float64_row_sums(inverse, rows.detach(), len(item_ids)).cpu().numpy()
    nonzero = np.ones(len(item_ids), dtype=bool)
    if sparse:
        nonzero = np.asarray(row_sums.any(axis=1))
    return TrainResult(
        item_ids=item_ids[nonzero],
        row_sums=row_sums[nonzero],
        row_counts=counts[nonzero],
        zero_ids=item_ids[~nonzero],
        zero_counts=counts[~nonzero],
        num_users=num_users,
        num_samples=num_samples,
        loss_sum=loss_sum,
        dense_sums={
            name: value[0].cpu().numpy() if one else value.cpu().double().sum(0).numpy()
            for name, value in dense.items()
        },
    )


class PlainSum(UploadStage):
    """The node's upload as it is: the sums of its users' rows and shared-dense copies
    (:func:`summed_upload`)."""

    name = "plain-sum"
    finishes = True

    def finish(self, uploads: Uploads, upload_round: UploadRound) -> TrainResult:
        return summed_upload(
            uploads.items,
            uploads.rows,
            upload_round.num_items,
            uploads.dense,
            num_users=len(uploads.users),
            num_samples=uploads.num_samples,
            loss_sum=uploads.loss_sum,
            sparse=upload_round.sparse,
        )


def upload_chain(config: RunGroups, data: Any) -> UploadChain:
    """The node's upload chain: the stages of the plug-ins ``config`` enables, in registry
    order, the audit's observers (:data:`fedrec_flwr.privacy.uploads.OBSERVERS`, when set),
    and the one finisher (a plug-in's, else :class:`PlainSum`)."""
    makers = [plugin.node for plugin in enabled_plugins(config, "node")]
    stages = [make(config, data) for make in makers if make is not None]
    finishers = [stage for stage in stages if stage.finishes]
    if len(finishers) > 1:
        names = ", ".join(stage.name for stage in finishers)
        raise ConfigError(f"the plug-ins {names} each finish a node's upload: enable one.")
    transforms = [stage for stage in stages if not stage.finishes]
    return UploadChain([*transforms, ObservedUploads()], finishers[0] if finishers else PlainSum())
