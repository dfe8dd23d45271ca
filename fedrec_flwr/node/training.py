"""The local update of a node's users, batched: mini-batch plan, epochs.

Each epoch shuffles a user's round samples (:mod:`fedrec_flwr.node.samples`; keyed by
(seed, user, round, epoch)) and cuts them into batches of ``batch-size``. Step ``s`` of the
epoch takes batch ``s`` of every user that has one, so users with more data simply take more
steps, exactly as if each trained alone. A step runs the phases of the method's stage in order
(:mod:`fedrec_flwr.methods.base`), each with the local optimiser (SGD, or SAM around it:
:mod:`fedrec_flwr.node.optim`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods.base import ROWS, Method, RoundContext, Step, bce_losses
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node import host_loops
from fedrec_flwr.node.lockstep import (
    BatchPlan,
    padded_width,
    planned_steps,
    shuffle_tag,
    tensor_epoch_steps,
    uniform_steps,
)
from fedrec_flwr.node.optim import local_optimizer
from fedrec_flwr.node.samples import RoundSamples
from fedrec_flwr.node.schedule import LocalSchedule
from fedrec_flwr.sampling import NegativeSampler
from fedrec_flwr.seeding import keyed_pcg64_states, keyed_rngs

MAX_STEP_ENTRIES = 1 << 20  # users x padded batch of one step; more are cut into several steps
COMPILED_SHUFFLE = 1 << 14  # samples from which the keyed-numpy shuffle takes the compiled loop


def epoch_steps(
    samples: RoundSamples,
    config: RunConfig,
    server_round: int,
    epoch: int,
    device: torch.device,
    stage: int = 0,
) -> list[Step]:
    """The mini-batch steps of one epoch for all users of ``samples``.

    ``step.users`` indexes the users of ``samples``. Each user's batch is padded to a
    multiple of ``PAD_TO`` entries: vectorised CPU kernels (``sigmoid``, ``exp``) treat a
    tail shorter than their vector width with scalar code that rounds differently, so
    aligned rows keep every user's arithmetic bit-identical whatever other users share the
    step. The padded width depends only on the user itself: its largest batch, the batch
    size or its own sample count if smaller, rounded up (a user with 80 samples and a batch
    of 256 takes 128 entries, not 256; full-batch training does not pad every user to the
    largest one). Zero-weight padding adds nothing to any sum, so the width changes no
    value. Users of different widths go to different steps; a step of more than
    ``MAX_STEP_ENTRIES`` entries is cut into several steps of fewer users. Under
    ``negative-sampler = "counter"`` the shuffle comes from the keyed Philox stream and the
    plan is built in tensor ops (:mod:`fedrec_flwr.node.lockstep`). On an accelerator every
    batch takes the widest user's width (:func:`~fedrec_flwr.node.lockstep.uniform_steps`):
    one step per step index (and per ``DEVICE_STEP_ENTRIES``), far fewer launches; values
    agree with the CPU's within float32 rounding.
    """
    batch = config.training.batch_size
    counts = np.diff(samples.sample_offsets)
    widths = user_widths(counts, batch, full=uniform_steps(device))
    if config.sampler.negative_sampler == NegativeSampler.COUNTER:  # the plan in tensor ops
        return tensor_epoch_steps(
            samples.sample_offsets,
            torch.from_numpy(np.asarray(samples.sample_rows, np.int64)).to(device),
            torch.from_numpy(np.asarray(samples.sample_labels, np.float32)).to(device),
            samples.users,
            widths,
            batch,
            config.training.seed,
            server_round,
            shuffle_tag(epoch, stage),
        )
    order = shuffled_order(samples, config.training.seed, server_round, epoch, stage)
    plan = BatchPlan(counts, widths, batch, MAX_STEP_ENTRIES, most_batches_first=True)
    return planned_steps(
        plan,
        torch.from_numpy(order),
        torch.from_numpy(np.asarray(samples.sample_rows, np.int64)).to(device),
        torch.from_numpy(np.asarray(samples.sample_labels, np.float32)).to(device),
    )


def shuffled_order(
    samples: RoundSamples, seed: int, server_round: int, epoch: int, stage: int = 0
) -> np.ndarray:
    """Each user's samples in its own shuffled order (keyed by (seed, user, round, epoch
    and, past the first, the stage)): positions into the flat samples, user after user.
    From ``COMPILED_SHUFFLE`` samples the generators' permutations come from a compiled
    loop (:func:`fedrec_flwr.node.host_loops.keyed_permutations`: the same ones)."""
    users = np.asarray(samples.users, dtype=np.int64)
    if not len(users):
        return np.empty(0, dtype=np.int64)
    counts = np.diff(samples.sample_offsets)
    keys = (epoch,) if stage == 0 else (epoch, stage)
    key_rows = np.empty((len(users), 2 + len(keys)), dtype=np.int64)
    key_rows[:, 0], key_rows[:, 1], key_rows[:, 2:] = users, server_round, keys
    if int(samples.sample_offsets[-1]) >= COMPILED_SHUFFLE:  # the generators in a loop
        states = keyed_pcg64_states(seed, "shuffle", key_rows)
        order = host_loops.keyed_permutations(states, counts)
        return order + np.repeat(np.asarray(samples.sample_offsets[:-1], np.int64), counts)
    return np.concatenate(
        [
            samples.sample_offsets[j] + rng.permutation(int(counts[j]))
            for j, rng in enumerate(keyed_rngs(seed, "shuffle", key_rows))
        ]
    )


def user_widths(counts: np.ndarray, batch: int, full: bool = False) -> np.ndarray:
    """Padded batch width of each user (see :func:`epoch_steps`): a function of the batch
    size and of the user's own sample count only: its largest batch rounded up to
    ``PAD_TO`` (a user with fewer samples than a batch is not padded to a whole batch).
    ``full``: the widest of these for every user (an accelerator's layout,
    :func:`~fedrec_flwr.node.lockstep.uniform_steps`: one width per step)."""
    own = padded_width(np.minimum(counts, batch))
    if full and len(own):
        return np.full(len(own), own.max(), np.int64)
    return own


def local_update(
    method: Method,
    samples: RoundSamples,
    params: dict[str, torch.Tensor],
    config: RunConfig,
    server_round: int,
    row_decay: dict[str, torch.Tensor] | None = None,
) -> tuple[float, int]:
    """Run the method's stages in place on ``params`` (``ROWS``: the flat row table; every
    other parameter [users of ``samples``, ...]).

    Returns (sum of per-sample BCE over the logged stage, number of its samples).
    ``row_decay``: filled with the round's ``RoundContext.row_decay`` (each user's log factor
    of weight decay, per row table).
    """
    device = params[ROWS].device
    context = round_context(samples, config, server_round, device)
    optimizer = local_optimizer(method, config, context)
    schedule = LocalSchedule.of(config, context)  # None: no learning-rate decay
    method.begin_local_update(params, context)
    row_names = layout(method).rows
    custom_after_step = type(method).after_step is not Method.after_step
    # Row gradients as their factors where the method gives them and the optimiser takes them.
    factored = getattr(optimizer, "takes_outer_rows", False) and getattr(
        type(method).closed_form_grads, "outer_rows", False
    )
    # The logged loss stays on the device, read once: no host sync per step.
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    num_samples = 0
    for index, stage in enumerate(method.stages()):
        for epoch in range(stage.epochs):
            for planned in epoch_steps(samples, config, server_round, epoch, device, index):
                step = planned if schedule is None else schedule.scaled(planned)
                logits = None
                gathered: dict[str, torch.Tensor] = {}  # this step's slices, while unchanged
                for phase in stage.phases:
                    gradients = _gradient_fn(
                        method, params, step, phase, row_names, gathered, factored
                    )
                    at = optimizer.step(params, step, gradients)
                    method.after_step(params, step, phase, context)
                    if custom_after_step:
                        gathered.clear()
                    for name in phase.params:
                        gathered.pop(name, None)
                    logits = at if logits is None else logits
                if stage.logged:
                    assert logits is not None  # a stage has at least one phase
                    loss_sum += logged_loss(logits, step)
            if stage.logged:  # every sample takes part once an epoch
                num_samples += int(samples.sample_offsets[-1])
    method.end_local_update(params, context)
    if row_decay is not None:
        row_decay.update(context.row_decay)
    return float(loss_sum), num_samples


def logged_loss(logits: torch.Tensor, step: Step) -> torch.Tensor:
    """The step's summed per-sample BCE (float64, on the device). On the CPU the real
    entries' losses are summed as one vector in order; elsewhere the padding's are zeroed in
    place (a compaction would wait for the device), which sums the same values in another
    order: equal within float64 rounding."""
    losses = bce_losses(logits, step)
    if losses.device.type == "cpu":  # the real entries, then float64 (exact): fewer to convert
        # NumPy's boolean compaction: the same values as ``losses[real]``, several times faster
        real = step.weights.numpy() > 0
        return torch.from_numpy(losses.numpy()[real].astype(np.float64)).sum()
    return torch.where(step.weights > 0, losses.double(), 0.0).sum()


def round_context(
    samples: RoundSamples, config: RunConfig, server_round: int, device: torch.device
) -> RoundContext:
    """The round's row blocks, sample counts and row labels, as tensors on ``device``."""
    row_labels = np.zeros(int(samples.row_offsets[-1]), dtype=np.float32)
    row_labels[samples.sample_rows[samples.sample_labels > 0]] = 1.0
    return RoundContext(
        server_round=server_round,
        num_rounds=config.training.num_server_rounds,
        users=np.asarray(samples.users, np.int64),
        row_offsets=torch.from_numpy(np.asarray(samples.row_offsets, np.int64)).to(device),
        sample_counts=torch.from_numpy(np.diff(samples.sample_offsets).astype(np.float32)).to(
            device
        ),
        row_labels=torch.from_numpy(row_labels).to(device),
    )


def _gradient_fn(
    method: Method,
    params: dict[str, torch.Tensor],
    step: Step,
    phase,
    row_names: tuple[str, ...] = (ROWS,),
    gathered: dict[str, torch.Tensor] | None = None,
    factored: bool = False,
):
    """Gradients of the method's loss w.r.t. ``phase.params`` at the current parameters plus
    optional offsets: closed form if the method gives it, else autograd. Row tables other
    than ``ROWS`` (private and global rows) are gathered per batch entry like the item rows.
    ``gathered`` caches the step's slices across phases (the caller drops those a phase
    changed): PFedRec's item phase reuses the rows its score phase gathered, and SAM's second
    gradient the slices of its first. ``factored``: the method's closed form (marked
    :func:`~fedrec_flwr.methods.parts.factors_rows`) gives the row gradient as its factors
    (:class:`~fedrec_flwr.methods.parts.OuterRows`), for an optimiser that takes them."""
    gathered = {} if gathered is None else gathered

    def take(name: str) -> torch.Tensor:
        if name not in gathered:
            tensor = params[name]
            if name == ROWS or name in row_names:  # a row copy, not per element
                flat = gathered_rows(tensor, step.rows.reshape(-1))
                gathered[name] = flat.view(*step.rows.shape, *tensor.shape[1:])
            else:
                gathered[name] = tensor.index_select(0, step.users)  # = tensor[step.users]
        return gathered[name]

    def gradients(offsets):
        others = {n: take(n) for n in params if n != ROWS}
        rows = take(ROWS)
        if offsets:
            others = {n: p + offsets[n] if n in offsets else p for n, p in others.items()}
            rows = rows + offsets[ROWS] if ROWS in offsets else rows
        if factored and not offsets:
            closed_form: Callable[..., Any] = method.closed_form_grads  # marked: factors_rows
            fast = closed_form(step, others, rows, phase.params, outer_rows=True)
        else:
            fast = method.closed_form_grads(step, others, rows, phase.params)
        if fast is not None:
            return fast
        return autograd_grads(method, step, others, rows, phase.params)

    gradients.starts = gathered  # type: ignore[attr-defined]  # the optimiser's row starts
    return gradients


def gathered_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table.index_select(0, index)``; on the CPU by ``np.take`` (the same copies of
    whole rows, a few times faster than ``index_select``'s loop)."""
    if table.device.type == "cpu" and table.dim() == 2 and not table.requires_grad:
        return torch.from_numpy(np.take(table.numpy(), index.numpy(), axis=0))
    return table.index_select(0, index)


def autograd_grads(
    method: Method,
    step: Step,
    others: dict[str, torch.Tensor],
    rows: torch.Tensor,
    wrt: tuple[str, ...],
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Gradients of ``method.loss`` w.r.t. ``wrt`` by autograd (rows: per batch entry)."""
    with torch.enable_grad():
        others = {n: p.detach().requires_grad_(n in wrt) for n, p in others.items()}
        rows = rows.detach().requires_grad_(ROWS in wrt)
        logits = method.logits(others, rows)
        loss = method.loss(step, others, rows, logits)
        leaves = [rows if n == ROWS else others[n] for n in wrt]
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    out = {
        n: torch.zeros_like(leaf) if g is None else g
        for n, leaf, g in zip(wrt, leaves, grads, strict=True)
    }
    return out, logits.detach()
