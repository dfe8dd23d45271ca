"""The mini-batch plan of an epoch in tensor ops (``negative-sampler = "counter"``).

The same lockstep as :func:`fedrec_flwr.node.training.epoch_steps`: step ``s`` takes batch
``s`` of every user that has one, each user's batch padded to its width (a multiple of
``PAD_TO``: bit-identical arithmetic whatever other users share the step). What differs is
how the plan is built: no Python loop over users and no NumPy generator per user.

- The shuffle: each user's samples are ordered by a 32-bit word of the keyed Philox stream
  (:mod:`fedrec_flwr.node.counter_rng`) of (seed, ``shuffle``, user, round, sample index,
  (stage, epoch)), ties by sample index (one stable sort of ``owner * 2**32 + word``). A
  user's order depends on nothing but its key: packing-invariant, the same on every device.
- The steps: every (user, batch) of the epoch is one run of entries in flat buffers (its
  group's base, its place in the group, its slot), so the rows and labels of every step
  are one scatter of the shuffled samples and the weights are runs; each step is a view.

The number of tensor operations per epoch is a constant plus a few per step, whatever the
number of users (a step is cut into several only above ``MAX_STEP_ENTRIES`` entries).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from fedrec_flwr.methods.base import Step
from fedrec_flwr.node import host_loops
from fedrec_flwr.node.counter_rng import MAX_ATTEMPTS, repeat, user_words
from fedrec_flwr.seeding import STREAMS

#: users x padded batch of one step; more are cut into several steps of fewer users (no
#: value changes: users never share a row). Small steps keep the step's temporaries (entries
#: x dim floats) below the allocator's mmap threshold: reused, not page-faulted afresh.
MAX_STEP_ENTRIES = 1 << 16
#: The same bound on an accelerator, where a step's cost is its kernel launches rather than
#: page faults: far larger steps, far fewer launches a round (a step's temporaries stay
#: within a few hundred MB).
DEVICE_STEP_ENTRIES = 1 << 20
#: Batch widths are multiples of this many entries (see ``training.epoch_steps``).
PAD_TO = 64
#: Samples from which :func:`shuffled_order` on the CPU takes the compiled loop.
COMPILED_SAMPLES = 1 << 14
#: The shuffle's sub-stream word is ``stage * EPOCH_KEYS + epoch`` (below 2**16).
EPOCH_KEYS = 1 << 12


def padded_width(sizes: np.ndarray) -> np.ndarray:
    """Entries a batch of ``sizes`` samples takes: rounded up to ``PAD_TO``, at least
    ``PAD_TO``."""
    return np.maximum(-(-np.asarray(sizes) // PAD_TO) * PAD_TO, PAD_TO).astype(np.int64)


def step_entries(device: torch.device) -> int:
    """The most entries of one step on ``device``: ``MAX_STEP_ENTRIES`` on the CPU,
    ``DEVICE_STEP_ENTRIES`` elsewhere. Users never share a row, so on the CPU the cut
    changes no value; on an accelerator the per-user reductions may round differently
    with the step's shape (within the tolerance ``tests/apps/test_cuda.py`` states)."""
    return MAX_STEP_ENTRIES if device.type == "cpu" else DEVICE_STEP_ENTRIES


def uniform_steps(device: torch.device) -> bool:
    """Does every batch on ``device`` take the batch size's padded width? On an accelerator,
    yes: a step is one launch per operator whatever its width, so one width per step
    index (and far fewer steps) beats padding each batch to its own size. On the CPU, no:
    the padding is work, and the own width keeps the arithmetic bit-identical."""
    return device.type != "cpu"


def shuffle_tag(epoch: int, stage: int) -> int:
    """The counter word that keeps each (stage, epoch) shuffle apart."""
    tag = stage * EPOCH_KEYS + epoch
    if not 0 <= epoch < EPOCH_KEYS or not 0 <= tag < MAX_ATTEMPTS:
        raise ValueError(
            f"epoch {epoch} of stage {stage}: the counter shuffle keys at most {EPOCH_KEYS} "
            f"epochs and {MAX_ATTEMPTS // EPOCH_KEYS} stages; use fewer local epochs or "
            "negative-sampler = 'keyed-numpy'."
        )
    return tag


def shuffled_order(
    seed: int,
    users: torch.Tensor,
    counts: torch.Tensor,
    server_round: int,
    tag: int,
) -> torch.Tensor:
    """The flat index of the sample at each (user, position) in user order: each user's
    samples ordered by their words (ties by index), users in order. On the CPU, from
    ``COMPILED_SAMPLES`` samples, each user's words drawn and sorted on their own by a
    compiled loop (:func:`fedrec_flwr.node.host_loops.shuffled_order`: the same order)."""
    if counts.device.type == "cpu" and int(counts.sum()) >= COMPILED_SAMPLES:
        order = host_loops.shuffled_order(
            seed, STREAMS["shuffle"], users.numpy(), counts.numpy(), server_round, tag
        )
        return torch.from_numpy(order)
    keys = repeat(torch.arange(len(counts), device=counts.device), counts)
    keys.bitwise_left_shift_(32).bitwise_or_(
        user_words(seed, STREAMS["shuffle"], users, server_round, counts, tag)
    )
    if keys.device.type == "cpu":  # the same permutation; NumPy's stable sort takes half
        return torch.from_numpy(np.argsort(keys.numpy(), kind="stable"))
    return torch.sort(keys, stable=True)[1]


def tensor_epoch_steps(
    sample_offsets: np.ndarray,
    sample_rows: torch.Tensor,
    sample_labels: torch.Tensor,
    users: np.ndarray,
    widths: np.ndarray,
    batch: int,
    seed: int,
    server_round: int,
    tag: int,
    max_entries: int | None = None,
    uniform: bool | None = None,
) -> list[Step]:
    """The steps of one epoch (see the module docstring). ``sample_rows``/``sample_labels``
    (on the run's device) are the samples of the users ``users`` (global ids), user ``j``
    owning ``sample_offsets[j]:sample_offsets[j+1]``; ``widths`` their padded widths.
    ``max_entries`` and ``uniform`` (see :class:`BatchPlan`): by default
    :func:`step_entries` and :func:`uniform_steps` of the device."""
    device = sample_rows.device
    max_entries = step_entries(device) if max_entries is None else max_entries
    uniform = uniform_steps(device) if uniform is None else uniform
    host_counts = np.diff(np.asarray(sample_offsets, np.int64))
    plan = BatchPlan(host_counts, np.asarray(widths, np.int64), batch, max_entries, uniform=uniform)
    if plan.total == 0:
        return []
    counts = torch.from_numpy(host_counts).to(device)
    global_users = torch.from_numpy(np.asarray(users, np.int64)).to(device)
    source = shuffled_order(seed, global_users, counts, server_round, tag)
    return planned_steps(plan, source, sample_rows, sample_labels, spread_padding=uniform)


def planned_steps(
    plan: BatchPlan,
    source: torch.Tensor,
    sample_rows: torch.Tensor,
    sample_labels: torch.Tensor,
    spread_padding: bool | None = None,
) -> list[Step]:
    """The steps of ``plan``, the samples taken in the shuffled order ``source`` (the flat
    index of the sample at each (user, position), users in order): the rows and labels of
    every step one scatter into flat buffers (on the CPU, from ``COMPILED_SAMPLES``
    entries, one compiled pass: :func:`fedrec_flwr.node.host_loops.batch_entries`), the
    weights runs, each step a view.

    Padding entries (weight zero) point at row 0; with ``spread_padding`` (by default
    where :func:`uniform_steps` holds: an accelerator) at rows of the samples instead
    (:func:`spread_rows`)."""
    device = sample_rows.device
    if spread_padding is None:
        spread_padding = uniform_steps(device)
    if plan.total == 0:
        return []
    if device.type == "cpu" and plan.total >= COMPILED_SAMPLES:  # each sample to its entry
        host_rows, host_labels = host_loops.batch_entries(
            plan.base,
            plan.start,
            plan.size,
            source.numpy(),
            sample_rows.numpy(),
            sample_labels.numpy(),
            plan.total,
        )
        rows, labels = torch.from_numpy(host_rows), torch.from_numpy(host_labels)
    else:
        # flat entry of the sample at each shuffled position: its batch's first entry + slot
        flat = np.repeat(plan.base - plan.start, plan.size)
        flat += np.arange(len(flat))
        entry = torch.from_numpy(flat).to(device)
        rows = torch.zeros(plan.total, dtype=torch.int64, device=device)
        labels = torch.zeros(plan.total, dtype=torch.float32, device=device)
        source = source.to(device)
        rows.index_put_((entry,), sample_rows.index_select(0, source))
        labels.index_put_((entry,), sample_labels.index_select(0, source))
    weights = entry_weights(plan).to(device)
    members = torch.from_numpy(plan.members).to(device)
    if spread_padding:
        rows = spread_rows(rows, weights, sample_rows)
    steps = []
    for lo, hi, first_member, count, width in plan.groups:
        shape = (count, width)
        steps.append(
            Step(
                users=members[first_member : first_member + count],
                rows=rows[lo:hi].view(shape),
                labels=labels[lo:hi].view(shape),
                weights=weights[lo:hi].view(shape),
            )
        )
    return steps


def entry_weights(plan: BatchPlan) -> torch.Tensor:
    """Each entry's weight (float32 [plan.total], on the CPU): a batch's entries are one run
    of the buffers, ``1 / size`` there, zero in the padding."""
    size, base = plan.size[plan.order], plan.base[plan.order]  # batches in buffer order
    ends = base + size
    lengths = np.stack([base - np.concatenate([[0], ends[:-1]]), size], 1).reshape(-1)
    lengths = np.append(lengths, plan.total - ends[-1])
    weight = 1.0 / torch.from_numpy(size).to(torch.float32)
    values = torch.stack([torch.zeros_like(weight), weight], 1).reshape(-1)
    values = torch.cat([values, values.new_zeros(1)])
    return repeat(values, torch.from_numpy(lengths))


def spread_rows(
    rows: torch.Tensor, weights: torch.Tensor, sample_rows: torch.Tensor
) -> torch.Tensor:
    """``rows`` with each padding entry (weight zero) moved from row 0 to a row of the
    samples (entry ``k``: sample ``k`` modulo their number). A padding entry's gradient is
    zero, so its row is never changed by more than the sign of a zero; but a deterministic
    ``index_add_`` on a device (a sort, then each row's entries summed one after another)
    would take every padding entry of a step in one chain on row 0. Spread over the round's
    rows, the chains are as long as a row's real repeats. No host sync: one ``where``."""
    spare = sample_rows.index_select(
        0, torch.arange(len(rows), device=rows.device).remainder_(len(sample_rows))
    )
    return torch.where(weights > 0, rows, spare)


class BatchPlan:
    """Where each batch's entries lie in the flat buffers (host arrays over the epoch's
    batches, no loop over users). Batch ``s`` of a user is padded to ``PAD_TO`` above its
    own size, at most to the user's width (its last batch is often shorter); the batches of
    step ``s`` and one width form a group (parts of at most ``max_entries`` entries), users
    in order: users never share a row, so neither the grouping nor the order changes a
    value. ``start``/``size``/``base``: each batch's first sample (flat, user order), its
    size and its first entry, batches user after user; ``order`` lists them by entry.

    ``most_batches_first``: the layout of the ``keyed-numpy`` plan instead (every batch
    padded to its user's width; in a group, users with more batches first, ties in order),
    whose steps sum the logged loss in that order.

    ``uniform``: every batch takes its user's width (with the widths of
    :func:`~fedrec_flwr.node.training.user_widths` ``full``, one width for all): a group is
    then a step index, not a (step index, width) pair (:func:`uniform_steps`)."""

    def __init__(
        self,
        counts: np.ndarray,
        widths: np.ndarray,
        batch: int,
        max_entries: int,
        most_batches_first: bool = False,
        uniform: bool = False,
    ):
        num_batches = -(-counts // batch)
        user = np.repeat(np.arange(len(counts)), num_batches)
        step = np.arange(len(user)) - np.repeat(np.cumsum(num_batches) - num_batches, num_batches)
        self.size = np.minimum(batch, counts[user] - step * batch)
        self.start = np.cumsum(self.size) - self.size
        if most_batches_first:
            width = widths[user]
            rank = np.empty(len(counts), dtype=np.int64)
            rank[np.argsort(-num_batches, kind="stable")] = np.arange(len(counts))
            self.order = np.lexsort((rank[user], width, step))
        else:
            width = widths[user] if uniform else np.minimum(widths[user], padded_width(self.size))
            self.order = np.lexsort((user, width, step))  # by step, then width, then user
        step, width = step[self.order], width[self.order]
        cut = np.flatnonzero((step[1:] != step[:-1]) | (width[1:] != width[:-1])) + 1
        bounds = np.concatenate([[0], cut, [len(step)]]).tolist() if len(step) else []
        base = np.empty(len(step), dtype=np.int64)
        self.groups, total = [], 0
        for lo, hi in itertools.pairwise(bounds):
            w = int(width[lo])
            per_part = max(1, max_entries // w)
            for first in range(lo, hi, per_part):
                count = min(per_part, hi - first)
                base[first : first + count] = total + w * np.arange(count)
                self.groups.append((total, total + count * w, first, count, w))
                total += count * w
        self.base = np.empty_like(base)
        self.base[self.order] = base
        self.members = user[self.order]
        self.total = total
