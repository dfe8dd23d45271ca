"""The mini-batch plan of an epoch in tensor ops (``negative-sampler = "counter"``).

The same lockstep as :func:`fedrec_flwr.node.training.epoch_steps`: step ``s`` takes batch
``s`` of every user that has one, each user's batch padded to its width (a multiple of
``PAD_TO``: bit-identical arithmetic whatever other users share the step). What differs is
how the plan is built: no Python loop over users and no NumPy generator per user.

- The shuffle: each user's samples are ordered by a 32-bit word of the keyed Philox stream
  (:mod:`fedrec_flwr.node.counter_rng`) of (seed, ``shuffle``, user, round, sample index,
  (stage, epoch)), ties by sample index (one stable sort of ``owner * 2**32 + word``). A
  user's order depends on nothing but its key: packing-invariant, the same on every device.
- The steps: every sample's place in its step follows from its shuffled position, its
  user's rank (users with most batches first) and the step's base, so the rows, labels and
  weights of every step are one scatter into flat buffers; each step is a view of them.

The number of tensor operations per epoch is a constant plus a few per step, whatever the
number of users (a step is cut into several only above ``MAX_STEP_ENTRIES`` entries).
"""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.methods.base import Step
from fedrec_flwr.node.counter_rng import MAX_ATTEMPTS, repeat, user_words
from fedrec_flwr.seeding import STREAMS

#: users x padded batch of one step; more are cut into several steps of fewer users (no
#: value changes: users never share a row). Small steps keep the step's temporaries (entries
#: x dim floats) below the allocator's mmap threshold: reused, not page-faulted afresh.
MAX_STEP_ENTRIES = 1 << 16
#: The shuffle's sub-stream word is ``stage * EPOCH_KEYS + epoch`` (below 2**16).
EPOCH_KEYS = 1 << 12


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


def shuffled_positions(
    seed: int,
    users: torch.Tensor,
    counts: torch.Tensor,
    server_round: int,
    tag: int,
) -> torch.Tensor:
    """``order``: for each (user, position) in user order, the user-local index of the
    sample at that shuffled position (flat, user after user)."""
    owner = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)
    starts = torch.cumsum(counts, 0) - counts
    return shuffled_order(seed, users, counts, server_round, tag) - starts[owner]


def shuffled_order(
    seed: int,
    users: torch.Tensor,
    counts: torch.Tensor,
    server_round: int,
    tag: int,
) -> torch.Tensor:
    """The flat index of the sample at each (user, position) in user order: each user's
    samples ordered by their words (ties by index), users in order."""
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
    max_entries: int = MAX_STEP_ENTRIES,
) -> list[Step]:
    """The steps of one epoch (see the module docstring). ``sample_rows``/``sample_labels``
    (on the run's device) are the samples of the users ``users`` (global ids), user ``j``
    owning ``sample_offsets[j]:sample_offsets[j+1]``; ``widths`` their padded widths."""
    device = sample_rows.device
    host_counts = np.diff(np.asarray(sample_offsets, np.int64))
    num_batches = -(-host_counts // batch)
    layout = _Layout(num_batches, np.asarray(widths, np.int64), max_entries)
    if layout.total == 0:
        return []
    runs = layout.batch_runs(host_counts, num_batches, batch)
    # flat entry of the sample at each shuffled position: its batch's first entry + its slot
    entry = np.repeat(runs.base - runs.start, runs.size)
    entry += np.arange(len(entry))
    entry = torch.from_numpy(entry).to(device)
    counts = torch.from_numpy(host_counts).to(device)
    global_users = torch.from_numpy(np.asarray(users, np.int64)).to(device)
    source = shuffled_order(seed, global_users, counts, server_round, tag)
    rows = torch.zeros(layout.total, dtype=torch.int64, device=device)
    labels = torch.zeros(layout.total, dtype=torch.float32, device=device)
    rows.index_put_((entry,), sample_rows.index_select(0, source))
    labels.index_put_((entry,), sample_labels.index_select(0, source))
    # a batch's entries are one run of the buffer: its weight there, zero in the padding
    by_base = np.argsort(runs.base, kind="stable")
    run_ends = runs.base[by_base] + runs.size[by_base]
    gaps = runs.base[by_base] - np.concatenate([[0], run_ends[:-1]])
    lengths = np.stack([gaps, runs.size[by_base]], 1).reshape(-1)
    lengths = np.append(lengths, layout.total - run_ends[-1])
    weight = 1.0 / torch.from_numpy(runs.size[by_base]).to(torch.float32)
    values = torch.stack([torch.zeros_like(weight), weight], 1).reshape(-1)
    values = torch.cat([values, values.new_zeros(1)])
    weights = repeat(values, torch.from_numpy(lengths)).to(device)
    members = torch.from_numpy(layout.members).to(device)
    steps = []
    for lo, hi, first_member, count, width in layout.groups:
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


class _Runs:
    """The batches of an epoch, user after user, batch after batch: ``start`` (flat index
    of its first sample in user order), ``size`` and ``base`` (its first entry in the
    buffers)."""

    def __init__(self, start: np.ndarray, size: np.ndarray, base: np.ndarray) -> None:
        self.start, self.size, self.base = start, size, base


class _Layout:
    """Where each step's entries lie in the flat buffers (host arrays over users, no loop
    over them). Users are ordered by width, then by batches (most first), then by position:
    the users active at step ``s`` of width ``w`` are a prefix of that width's class."""

    def __init__(self, num_batches: np.ndarray, widths: np.ndarray, max_entries: int) -> None:
        classes, width_class = np.unique(widths, return_inverse=True)
        self.widths = widths
        self.width_class = width_class.astype(np.int64)
        self.members = np.lexsort((-num_batches, self.width_class)).astype(np.int64)
        rank = np.empty(len(widths), dtype=np.int64)
        rank[self.members] = np.arange(len(widths))
        self.class_rank = rank
        steps = int(num_batches.max(initial=0))
        class_start = np.searchsorted(self.width_class[self.members], np.arange(len(classes)))
        # active[c, s]: users of class c with more than s batches
        histogram = np.zeros((len(classes), steps + 1), dtype=np.int64)
        np.add.at(histogram, (self.width_class, num_batches), 1)
        active = histogram[:, ::-1].cumsum(1)[:, ::-1][:, 1:]
        self.group_of = np.zeros((len(classes), max(steps, 1)), dtype=np.int64)
        bases, firsts, groups, total = [], [], [], 0
        for s in range(steps):  # groups: (step, width class, part), in that order
            for c, width in enumerate(classes.tolist()):
                count = int(active[c, s])
                if count == 0:
                    continue
                self.group_of[c, s] = len(bases)
                per_part = max(1, max_entries // width)
                for lo in range(0, count, per_part):
                    part = min(per_part, count - lo)
                    first = int(class_start[c]) + lo
                    bases.append(total)
                    firsts.append(first)
                    groups.append((total, total + part * width, first, part, width))
                    total += part * width
        self.bases = np.asarray(bases, np.int64)
        self.first_member = np.asarray(firsts, np.int64)
        self.groups = groups
        self.total = total
        self.class_start = class_start.astype(np.int64)
        self.part_size = np.maximum(1, max_entries // classes).astype(np.int64)

    def batch_runs(self, counts: np.ndarray, num_batches: np.ndarray, batch: int) -> _Runs:
        """Every (user, batch) of the epoch (host arrays over the batches): the user's
        group at that step, its place in the group, the group's base."""
        user = np.repeat(np.arange(len(counts)), num_batches)
        first = np.cumsum(num_batches) - num_batches
        step = np.arange(len(user)) - first[user]
        size = np.minimum(batch, counts[user] - step * batch)
        width_class = self.width_class[user]
        rank = self.class_rank[user]
        part = (rank - self.class_start[width_class]) // self.part_size[width_class]
        group = self.group_of[width_class, step] + part
        base = self.bases[group] + (rank - self.first_member[group]) * self.widths[user]
        return _Runs(np.cumsum(size) - size, size, base)
