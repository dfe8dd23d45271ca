"""A counter-based keyed generator in tensor ops, and negative sampling from it.

Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
keyed bijection of a 128-bit counter. Here the key is the run's seed (two 32-bit words) and
the counter is (index // 4, user, round, stream << 16 | attempt); each block gives four
32-bit words, lane ``index % 4`` of which is draw ``index``. A draw therefore depends only
on (seed, stream, user, round, index, attempt): the same whatever other users share the
call (packing-invariant), whatever the order, and whatever the device.

Every value is a non-negative int64 below 2**49: the 32x32-bit products are formed from
16-bit halves of the constants, so no operation overflows and CPU and CUDA compute the same
integers (no float arithmetic until the last step).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from fedrec_flwr.node import host_loops

MASK32 = 0xFFFFFFFF
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
PHILOX_ROUNDS = 10
#: Lanes per Philox block: consecutive draws share a block.
LANES = 4
#: Attempts (a draw's redraws) and streams fit 16 bits each in the last counter word.
MAX_ATTEMPTS = 1 << 16
#: Draws from which :func:`counter_negatives` on the CPU takes the compiled loop.
COMPILED_DRAWS = 1 << 14


def _mulhilo(
    word: torch.Tensor, constant: int, high: torch.Tensor, low: torch.Tensor, spill: torch.Tensor
) -> None:
    """(high, low) 32-bit words of ``word * constant`` for 32-bit ``word`` and ``constant``,
    from products below 2**48 (exact in int64 on every device), written into ``high`` and
    ``low`` (``spill``: scratch of the same shape; no temporaries)."""
    torch.mul(word, constant >> 16, out=high)
    torch.mul(word, constant & 0xFFFF, out=low)
    torch.bitwise_and(high, 0xFFFF, out=spill)
    low.add_(spill.bitwise_left_shift_(16))  # the product's low 48 bits
    high.bitwise_right_shift_(16).add_(torch.bitwise_right_shift(low, 32, out=spill))
    low.bitwise_and_(MASK32)


def philox_blocks(
    counters: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox4x32-10 of the four 32-bit counter words (int64 tensors of one shape) under the
    64-bit ``seed``: four int64 tensors of 32-bit words. The counters are not written; the
    rounds run in place in buffers of their own."""
    c0, c1, c2, c3 = counters
    shape = torch.broadcast_shapes(*(c.shape for c in counters))
    new = lambda: torch.empty(shape, dtype=torch.int64, device=c0.device)  # noqa: E731
    free, spill = [new() for _ in range(4)], new()
    key0, key1 = seed & MASK32, (seed >> 32) & MASK32
    for index in range(PHILOX_ROUNDS):
        hi0, lo0, hi1, lo1 = free
        _mulhilo(c0, PHILOX_M0, hi0, lo0, spill)
        _mulhilo(c2, PHILOX_M1, hi1, lo1, spill)
        hi1.bitwise_xor_(c1).bitwise_xor_(key0)
        hi0.bitwise_xor_(c3).bitwise_xor_(key1)
        free = [c0, c1, c2, c3] if index > 0 else [new() for _ in range(4)]
        c0, c1, c2, c3 = hi1, lo1, hi0, lo0
        key0, key1 = (key0 + PHILOX_W0) & MASK32, (key1 + PHILOX_W1) & MASK32
    return c0, c1, c2, c3


def repeat(values: torch.Tensor, repeats: torch.Tensor) -> torch.Tensor:
    """``torch.repeat_interleave(values, repeats)`` (1-D); on the CPU NumPy's one-pass
    ``repeat`` (the same integers, without the index tensor in between)."""
    if values.device.type == "cpu":
        return torch.from_numpy(np.repeat(values.numpy(), repeats.numpy()))
    return torch.repeat_interleave(values, repeats)


def random_words(
    seed: int,
    stream: int,
    users: torch.Tensor,
    server_round: int,
    indices: torch.Tensor,
    attempt: int | torch.Tensor = 0,
) -> torch.Tensor:
    """Uniform 32-bit words (int64) of draws ``indices`` of ``users`` (same shape) in
    ``server_round``: the word of key (seed, stream, user, round, index, attempt)."""
    indices = indices.to(torch.int64)
    lanes = random_blocks(seed, stream, users, server_round, indices // LANES, attempt)
    return torch.gather(lanes, -1, (indices % LANES).unsqueeze(-1)).squeeze(-1)


def random_blocks(
    seed: int,
    stream: int,
    users: torch.Tensor,
    server_round: int,
    blocks: torch.Tensor,
    attempt: int | torch.Tensor = 0,
) -> torch.Tensor:
    """The words of draws ``4 * block .. 4 * block + 3`` of ``users`` (shape + (4,))."""
    if not 0 <= stream < MAX_ATTEMPTS or seed < 0 or seed >> 64:
        raise ValueError(f"seed={seed}, stream={stream}: use a seed in [0, 2**64), stream < 2**16")
    users = users.to(torch.int64)
    tag = torch.as_tensor(attempt, dtype=torch.int64, device=users.device) + (stream << 16)
    counters = (
        blocks.to(torch.int64),
        users & MASK32,
        torch.full_like(users, server_round & MASK32),
        tag.expand_as(users),
    )
    return torch.stack(philox_blocks(counters, int(seed)), dim=-1)


def uniform_integers(words: torch.Tensor, high: int) -> torch.Tensor:
    """Integers in ``[0, high)`` from 32-bit words (multiply-shift: bias below high / 2**32)."""
    if not 0 < high < 1 << 31:
        raise ValueError(f"high={high}: draws need 0 < high < 2**31")
    return (words * high) >> 32


def uniform_floats(words: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Floats in ``[0, 1)`` from the top 24 bits of 32-bit words (exact in float32)."""
    return (words >> 8).to(dtype) * (1.0 / (1 << 24))


def user_words(
    seed: int,
    stream: int,
    users: torch.Tensor,
    server_round: int,
    sizes: torch.Tensor,
    attempt: int = 0,
) -> torch.Tensor:
    """Words of draws ``0 .. sizes[j] - 1`` of each of ``users`` (int64 tensors, one entry
    per user), user after user: whole blocks of four draws, each user's last block cut to
    its size (one Philox block per four draws)."""
    device = users.device
    block_counts = (sizes + LANES - 1) // LANES
    first_blocks = torch.cumsum(block_counts, 0) - block_counts
    blocks = repeat(-first_blocks, block_counts)
    blocks.add_(torch.arange(len(blocks), device=device))
    block_users = repeat(users.to(torch.int64), block_counts)
    words = random_blocks(seed, stream, block_users, server_round, blocks, attempt)
    # draw i of user j is lane i of the user's blocks: one gather, no mask
    lanes = repeat(LANES * first_blocks - (torch.cumsum(sizes, 0) - sizes), sizes)
    lanes.add_(torch.arange(len(lanes), device=device))
    return words.view(-1).index_select(0, lanes)


def counter_negatives(
    seed: int,
    stream: int,
    server_round: int,
    users: npt.ArrayLike,
    sizes: npt.ArrayLike,
    exclusion_counts: npt.ArrayLike,
    exclusions: np.ndarray,
    num_items: int,
    device: torch.device | str = "cpu",
) -> np.ndarray:
    """``sizes[j]`` uniform items of ``range(num_items)`` outside user ``users[j]``'s sorted
    exclusion set (``exclusion_counts[j]`` items of ``exclusions``, users in order), all
    concatenated. Draw ``i`` of a user is redrawn with the next attempt while it falls in
    the set: every user's draws in lockstep, in tensor ops, none depending on another user;
    on the CPU, from ``COMPILED_DRAWS`` draws, each draw and its redraws in a compiled loop
    (:func:`fedrec_flwr.node.host_loops.counter_negatives`: the same integers).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    exclusion_counts = np.asarray(exclusion_counts, dtype=np.int64)
    _check_drawable(users, sizes, exclusion_counts, num_items)
    if torch.device(device).type == "cpu" and int(sizes.sum()) >= COMPILED_DRAWS:
        users = np.asarray(users, np.int64)
        key = (seed, stream, server_round, users, sizes, exclusion_counts, exclusions)
        return host_loops.counter_negatives(*key, num_items, MAX_ATTEMPTS)
    as_tensor = lambda values: torch.as_tensor(np.asarray(values, np.int64), device=device)  # noqa: E731
    positions = torch.arange(len(sizes), device=device)
    user_ids, starts = as_tensor(users), as_tensor(np.cumsum(sizes) - sizes)
    owner = repeat(positions, as_tensor(sizes))
    excluded_keys = repeat(positions * num_items, as_tensor(exclusion_counts))
    excluded_keys += as_tensor(exclusions)  # sorted: users in order, each set sorted
    words = user_words(seed, stream, user_ids, server_round, as_tensor(sizes))
    draws = uniform_integers(words, num_items)
    keys = owner * num_items  # the first test covers every draw: no gathers
    wrong = torch.nonzero(_is_member(keys.add_(draws), excluded_keys)).view(-1)
    del keys
    # only the redrawn entries need their user and index
    owner = owner[wrong]
    draw_users, indices = user_ids[owner], wrong - starts[owner]
    for attempt in range(1, MAX_ATTEMPTS):
        if len(wrong) == 0:
            break
        words = random_words(seed, stream, draw_users, server_round, indices, attempt)
        draws[wrong] = uniform_integers(words, num_items)
        still = _is_member(owner * num_items + draws[wrong], excluded_keys)
        wrong, owner, draw_users, indices = (
            wrong[still],
            owner[still],
            draw_users[still],
            indices[still],
        )
    else:
        raise RuntimeError(f"negative draws still excluded after {MAX_ATTEMPTS} attempts")
    return draws.cpu().numpy()


def _check_drawable(
    users: npt.ArrayLike, sizes: np.ndarray, exclusion_counts: np.ndarray, num_items: int
) -> None:
    """Refuse a user with draws to make whose exclusion set covers every item."""
    full = (sizes > 0) & (exclusion_counts >= num_items)
    if full.any():
        user = int(np.asarray(users)[np.flatnonzero(full)[0]])
        raise ValueError(
            f"cannot draw negatives for user {user}: its exclusion set covers all {num_items} "
            "items; use train-negatives = 'non-train' or a dataset with more items."
        )


def _is_member(values: torch.Tensor, sorted_set: torch.Tensor) -> torch.Tensor:
    """Boolean mask: which ``values`` occur in the sorted ``sorted_set``."""
    if len(sorted_set) == 0:
        return torch.zeros(len(values), dtype=torch.bool, device=values.device)
    where = torch.searchsorted(sorted_set, values).clamp_(max=len(sorted_set) - 1)
    return sorted_set[where] == values
