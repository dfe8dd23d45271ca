"""The tensors a node's round trains (:func:`round_params`): the round users' private
parameters, a copy per user of the global shared-dense parameters, the item rows they start
from, the frozen global view and their private rows; and the tuned rows' zero threshold
(:func:`zero_small_rows`)."""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.methods import ROWS, Method
from fedrec_flwr.methods.capabilities import private_rows_in
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.personal import KEY_STRIDE
from fedrec_flwr.node.samples import RoundSamples
from fedrec_flwr.node.state import NodeState


def user_params(
    method: Method,
    state: NodeState,
    positions: np.ndarray,
    dense: dict[str, np.ndarray],
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """The round users' private parameters, and a copy per user of the global shared-dense
    parameters."""
    index = torch.from_numpy(positions)
    params = {k: v[index].to(device) for k, v in state.private.items()}
    for name in layout(method).shared_dense:
        if name not in dense:
            raise RuntimeError(
                f"the server sent no '{name}' (shared-dense parameter of "
                f"{method.name}): do server and node run the same method?"
            )
        value = torch.from_numpy(np.asarray(dense[name], np.float32)).to(device)
        params[name] = value.unsqueeze(0).repeat(len(positions), *[1] * value.dim())
    return params


def round_params(
    method: Method,
    state: NodeState,
    positions: np.ndarray,
    dense: dict[str, np.ndarray],
    samples: RoundSamples,
    received: np.ndarray,
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """Every tensor the round's local update trains: :func:`user_params`, the item rows
    (``ROWS``: the ``received`` global rows of ``samples``' flat rows, or the users'
    personal rows where they persist; on the host they share ``received``'s memory), the
    frozen global view and the private rows (zero for the items a user never trained)."""
    params = user_params(method, state, positions, dense, device)
    for name in layout(method).global_rows:  # the frozen global view
        params[name] = torch.from_numpy(received.copy()).to(device)
    if layout(method).train_from_personal:  # the local rows persist
        local = state.personal.gathered(samples.row_positions(), samples.row_items)
        held = np.isin(
            samples.row_positions() * KEY_STRIDE + samples.row_items,
            state.personal.keys(),
        )
        received = np.where(held[:, None], local, received)
    params[ROWS] = torch.from_numpy(received).to(device)
    for name in layout(method).private_rows:
        rows = state.private_rows[name].gathered(samples.row_positions(), samples.row_items)
        rows = private_rows_in(method, name, rows, samples.row_items)
        params[name] = torch.from_numpy(rows).to(device)
    return params


def zero_small_rows(rows: torch.Tensor, threshold: float | None) -> torch.Tensor:
    """``rows`` (in place) with those whose largest absolute value is at or below the
    method's zero ``threshold`` set to zero: they count, and travel, as zero (None: dense
    rows, unchanged)."""
    if threshold is not None:
        rows[rows.abs().amax(dim=1) <= threshold] = 0.0
    return rows
