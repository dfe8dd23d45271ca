"""The tensors a node's round trains (:func:`round_params`): the round users' private
parameters, a copy per user of the global shared-dense parameters, the item rows they start
from (:func:`round_rows`), the frozen global view and their private rows; the tuned rows'
zero threshold (:func:`zero_small_rows`); and the copies of a round's tensors on the host
(:func:`host_copy`, :func:`host_array`)."""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.methods import ROWS, Method
from fedrec_flwr.methods.capabilities import private_rows_in
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.host_memory import populated_empty
from fedrec_flwr.node.personal import KEY_STRIDE
from fedrec_flwr.node.samples import RoundSamples, distinct_items
from fedrec_flwr.node.scoring import lookup_rows
from fedrec_flwr.node.state import NodeState


def round_rows(
    items: np.ndarray,
    item_ids: np.ndarray | None,
    item_rows: np.ndarray,
    device: torch.device,
) -> torch.Tensor:
    """The global rows of the round's flat ``items`` (:func:`lookup_rows` of the rows the
    node received: ``item_ids`` None = the full table), as a new tensor on ``device``.

    On the host: the looked-up array (the tensor shares its memory). On an accelerator:
    the rows of the distinct items travel, once each, and the flat rows are gathered
    there (:func:`gathered_rows`); the host never holds them."""
    if device.type == "cpu":
        return torch.from_numpy(lookup_rows(items, item_ids, item_rows))
    return gathered_rows(items, item_ids, item_rows, device)


def gathered_rows(
    items: np.ndarray,
    item_ids: np.ndarray | None,
    item_rows: np.ndarray,
    device: torch.device,
) -> torch.Tensor:
    """:func:`round_rows` on an accelerator (on any device, the same values): the rows of
    the distinct ``items`` (looked up and checked on the host) copied to ``device``, and
    the flat rows gathered from them there."""
    items = np.asarray(items, dtype=np.int64)
    distinct, inverse = distinct_items(items, int(items.max()) + 1 if len(items) else 0)
    table = torch.from_numpy(lookup_rows(distinct, item_ids, item_rows)).to(device)
    return table.index_select(0, torch.from_numpy(inverse).to(device))


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of ``tensor`` on the host (one copy, wherever it is)."""
    tensor = tensor.detach()
    return tensor.clone() if tensor.device.type == "cpu" else tensor.cpu()


def host_array(tensor: torch.Tensor) -> np.ndarray:
    """``tensor`` as a NumPy array: itself on the host; from an accelerator, float32 copied
    into memory mapped at once (:func:`~fedrec_flwr.node.host_memory.populated_empty`:
    a round's tuned rows, which the personal-row store keeps, are fresh memory)."""
    tensor = tensor.detach()
    if tensor.device.type == "cpu" or tensor.dtype != torch.float32:
        return tensor.cpu().numpy()
    out = populated_empty(tuple(tensor.shape), np.float32)
    torch.from_numpy(out).copy_(tensor)
    return out


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
    received: torch.Tensor,
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """Every tensor the round's local update trains: :func:`user_params`, the item rows
    (``ROWS``: ``received``, the global rows of ``samples``' flat rows on ``device``
    (:func:`round_rows`), itself, or the users' personal rows where they persist), the
    frozen global view and the private rows (zero for the items a user never trained)."""
    params = user_params(method, state, positions, dense, device)
    for name in layout(method).global_rows:  # the frozen global view
        params[name] = received.clone()
    if layout(method).train_from_personal:  # the local rows persist
        local = state.personal.gathered(samples.row_positions(), samples.row_items)
        held = np.isin(
            samples.row_positions() * KEY_STRIDE + samples.row_items,
            state.personal.keys(),
        )
        mask = torch.from_numpy(held[:, None]).to(device)
        received = torch.where(mask, torch.from_numpy(local).to(device), received)
    params[ROWS] = received
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
