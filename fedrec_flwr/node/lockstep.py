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
from fedrec_flwr.node.counter_rng import MAX_ATTEMPTS, user_words
from fedrec_flwr.seeding import STREAMS

#: users x padded batch of one step; more are cut into several steps of fewer users.
MAX_STEP_ENTRIES = 1 << 22
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
    device = counts.device
    owner = torch.repeat_interleave(torch.arange(len(counts), device=device), counts)
    words = user_words(seed, STREAMS["shuffle"], users, server_round, counts, tag)
    _, order = torch.sort((owner << 32) | words, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    return order - starts[owner]


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
    counts = torch.from_numpy(host_counts).to(device)
    owner = torch.repeat_interleave(torch.arange(len(host_counts), device=device), counts)
    starts = torch.cumsum(counts, 0) - counts
    position = torch.arange(len(owner), device=device) - starts[owner]
    global_users = torch.from_numpy(np.asarray(users, np.int64)).to(device)
    source = starts[owner] + shuffled_positions(seed, global_users, counts, server_round, tag)
    step, slot = position // batch, position % batch
    in_batch = torch.minimum(torch.full_like(counts, batch)[owner], counts[owner] - step * batch)
    # flat entry of each sample: its group's base + its user's place in the group + its slot
    user_width = torch.from_numpy(layout.widths).to(device)
    width_class = torch.from_numpy(layout.width_class).to(device)[owner]
    in_class = torch.from_numpy(layout.class_rank - layout.class_start[layout.width_class])
    part = in_class.to(device)[owner] // torch.from_numpy(layout.part_size).to(device)[width_class]
    group = torch.from_numpy(layout.group_of).to(device)[width_class, step] + part
    base = torch.from_numpy(layout.bases).to(device)[group]
    first = torch.from_numpy(layout.first_member).to(device)[group]
    member = torch.from_numpy(layout.class_rank).to(device)[owner] - first
    entry = base + member * user_width[owner] + slot
    rows = torch.zeros(layout.total, dtype=torch.int64, device=device)
    labels = torch.zeros(layout.total, dtype=torch.float32, device=device)
    weights = torch.zeros(layout.total, dtype=torch.float32, device=device)
    rows[entry] = sample_rows[source]
    labels[entry] = sample_labels[source]
    weights[entry] = 1.0 / in_batch.to(torch.float32)
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
