"""The local update of a node's users, batched: samples, mini-batch plan, epochs.

Per user and round: its train rows as positives plus ``num-negatives`` fresh uniform
negatives per positive (generator keyed by (seed, user, round)); each epoch shuffles them
(keyed by (seed, user, round, epoch)) and cuts them into batches of ``batch-size``. Step ``s``
of the epoch takes batch ``s`` of every user that has one, so users with more data simply
take more steps, exactly as if each trained alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import PreparedData
from fedrec_flwr.methods.base import Method, Step
from fedrec_flwr.sampling import sample_excluding
from fedrec_flwr.seeding import keyed_rng

PAD_TO = 64  # entries; see epoch_steps


def user_round_items(
    prepared: PreparedData, config: RunConfig, user: int, server_round: int
) -> tuple[np.ndarray, np.ndarray]:
    """(items, labels) a user trains on in a round: its positives, then its negatives."""
    positives = prepared.train_positives(user)
    rng = keyed_rng(config.seed, "train-negatives", user, server_round)
    negatives = sample_excluding(
        rng,
        prepared.num_items,
        prepared.negative_exclusion(user),
        config.num_negatives * len(positives),
    )
    labels = np.r_[np.ones(len(positives), np.float32), np.zeros(len(negatives), np.float32)]
    return np.r_[positives, negatives], labels


@dataclass(frozen=True)
class RoundSamples:
    """Training samples of several users, each with its own block of item rows.

    User ``j`` owns flat rows ``row_offsets[j]:row_offsets[j+1]`` (items ``row_items``) and
    samples ``sample_offsets[j]:sample_offsets[j+1]`` (flat row ``sample_rows``, label).
    """

    users: np.ndarray
    positions: np.ndarray
    row_offsets: np.ndarray
    row_items: np.ndarray
    sample_offsets: np.ndarray
    sample_rows: np.ndarray
    sample_labels: np.ndarray


def build_round_samples(
    prepared: PreparedData,
    config: RunConfig,
    users: np.ndarray,
    positions: np.ndarray,
    server_round: int,
    items_of: Callable[[int], tuple[np.ndarray, np.ndarray]] | None = None,
) -> RoundSamples:
    """Samples of ``users`` (global ids; ``positions`` in the node's private tensors).

    ``items_of(user)`` may supply the user's (items, labels) if they were drawn already.
    """
    if items_of is None:

        def items_of(user: int) -> tuple[np.ndarray, np.ndarray]:
            return user_round_items(prepared, config, user, server_round)

    row_items, sample_rows, labels = [], [], []
    row_counts, sample_counts = [], []
    offset = 0
    for user in users:
        items, user_labels = items_of(int(user))
        distinct, inverse = np.unique(items, return_inverse=True)
        row_items.append(distinct)
        sample_rows.append(inverse + offset)
        labels.append(user_labels)
        row_counts.append(len(distinct))
        sample_counts.append(len(items))
        offset += len(distinct)

    def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.empty(0, dtype)

    return RoundSamples(
        users=np.asarray(users, dtype=np.int64),
        positions=np.asarray(positions, dtype=np.int64),
        row_offsets=np.r_[0, np.cumsum(row_counts)].astype(np.int64),
        row_items=cat(row_items, np.int64),
        sample_offsets=np.r_[0, np.cumsum(sample_counts)].astype(np.int64),
        sample_rows=cat(sample_rows, np.int64),
        sample_labels=cat(labels, np.float32),
    )


def epoch_steps(
    samples: RoundSamples, config: RunConfig, server_round: int, epoch: int, device: torch.device
) -> list[Step]:
    """The mini-batch steps of one epoch for all users of ``samples``.

    Each user's batch is padded to a multiple of ``PAD_TO`` entries: vectorised CPU kernels
    (``sigmoid``, ``exp``) treat a tail shorter than their vector width with scalar code that
    rounds differently, so aligned rows keep every user's arithmetic bit-identical whatever
    other users share the step.
    """
    batch = config.batch_size
    width = -(-batch // PAD_TO) * PAD_TO
    counts = np.diff(samples.sample_offsets)
    num_batches = -(-counts // batch)
    by_batches = np.argsort(-num_batches, kind="stable")  # users with most batches first
    rank = np.empty_like(by_batches)
    rank[by_batches] = np.arange(len(by_batches))

    # Each user's samples in its own shuffled order.
    order = (
        np.concatenate(
            [
                samples.sample_offsets[j]
                + keyed_rng(config.seed, "shuffle", int(user), server_round, epoch).permutation(
                    int(counts[j])
                )
                for j, user in enumerate(samples.users)
            ]
        )
        if len(samples.users)
        else np.empty(0, dtype=np.int64)
    )
    owner = np.repeat(np.arange(len(counts)), counts)
    position = np.arange(len(order)) - np.repeat(samples.sample_offsets[:-1], counts)
    step_of, slot_of = position // batch, position % batch
    # Size of the batch each sample belongs to (the last batch of a user may be short).
    batch_size_of = np.minimum(batch, counts[owner] - step_of * batch)

    steps = []
    by_step = np.argsort(step_of, kind="stable")
    bounds = np.searchsorted(step_of[by_step], np.arange(int(num_batches.max(initial=0)) + 1))
    for s in range(len(bounds) - 1):
        idx = by_step[bounds[s] : bounds[s + 1]]
        active = int((num_batches > s).sum())
        rows = np.zeros((active, width), dtype=np.int64)
        labels = np.zeros((active, width), dtype=np.float32)
        weights = np.zeros((active, width), dtype=np.float32)
        r, slot = rank[owner[idx]], slot_of[idx]
        rows[r, slot] = samples.sample_rows[order[idx]]
        labels[r, slot] = samples.sample_labels[order[idx]]
        weights[r, slot] = 1.0 / batch_size_of[idx]
        steps.append(
            Step(
                users=torch.from_numpy(samples.positions[by_batches[:active]]).to(device),
                rows=torch.from_numpy(rows).to(device),
                labels=torch.from_numpy(labels).to(device),
                weights=torch.from_numpy(weights).to(device),
            )
        )
    return steps


def local_update(
    method: Method,
    samples: RoundSamples,
    rows: torch.Tensor,
    private: dict[str, torch.Tensor],
    config: RunConfig,
    server_round: int,
) -> tuple[float, int]:
    """Run ``local-epochs`` epochs in place on ``rows`` and ``private``.

    Returns (sum of per-sample BCE over the round, number of samples).
    """
    loss_sum, num_samples = 0.0, 0
    for epoch in range(config.local_epochs):
        for step in epoch_steps(samples, config, server_round, epoch, rows.device):
            losses = method.train_step(step, rows, private)
            real = step.weights > 0
            loss_sum += float(losses[real].double().sum())
            num_samples += int(real.sum())
    return loss_sum, num_samples
