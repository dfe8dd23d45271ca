"""Compiled host loops (numba) for a round's integer and index work on the CPU: the same
integers as the tensor ops they stand for, with no temporaries the size of the round and no
global sort.

- :func:`counter_negatives`: :func:`fedrec_flwr.node.counter_rng.counter_negatives`, each
  draw's Philox4x32-10 word and its redraws computed where they are used, the user's
  exclusion set marked in a scratch array over the items;
- :func:`shuffled_order`: :func:`fedrec_flwr.node.lockstep.shuffled_order`, each user's
  words sorted on their own (a stable sort: ties by index, as the global one);
- :func:`batch_entries`: the rows and labels of an epoch's step buffers
  (:func:`fedrec_flwr.node.lockstep.planned_steps`), each sample copied to its entry;
- :func:`user_rows`: :func:`fedrec_flwr.node.samples.user_rows`, each user's distinct
  items marked in a scratch array and sorted on their own;
- :func:`add_rows`: a row update (:class:`fedrec_flwr.node.row_updates.RowAdder`), each
  entry added to its row in place, in order, as ``index_add_`` adds it; :func:`add_outer_rows`
  the same of a source that is a factor per entry times a vector per user, each product
  taken where it is added;
- :func:`repeated_entries`: the entries of repeated rows in the row update's tensor form,
  one pass over a scratch of counts;
- :func:`candidate_rows`: :meth:`fedrec_flwr.node.protocols.PaperProtocol.keep_personal_rows`,
  each user's candidates marked in a scratch array over the items;
- :func:`keyed_negatives` and :func:`keyed_permutations`: the ``keyed-numpy`` sampler's
  draws (:func:`fedrec_flwr.node.samples.users_round_items`) and shuffles
  (:func:`fedrec_flwr.node.training.shuffled_order`), each user's NumPy PCG64 generator
  stepped in the loop (:mod:`fedrec_flwr.node.pcg_kernels`);
- :func:`stored_pairs`: :meth:`fedrec_flwr.node.personal.PersonalRows.find`, each pair
  searched among its own user's items instead of among every stored key;
- :func:`pair_positions`: :func:`fedrec_flwr.node.rank_entries.pair_where`, each user's
  pairs marked in a scratch array over the items;
- :func:`float64_row_sums`: :func:`fedrec_flwr.node.upload.float64_row_sums`, the float64
  sums of float32 rows added in row order, as ``index_add_`` adds them (float64 additions
  of exact conversions, one per element and row: no other rounding).

Each loop compiles on its first call in a process (cached on disk where numba can write its
cache).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MASK32 = 0xFFFFFFFF


def _kernels():
    """The compiled loops' module (numba imported on first use)."""
    from fedrec_flwr.node import host_kernels

    return host_kernels


def _ranks():
    """The full ranking's loops' module (numba imported on first use)."""
    from fedrec_flwr.node import rank_kernels

    return rank_kernels


def _pcg():
    """The PCG64 loops' module (numba imported on first use)."""
    from fedrec_flwr.node import pcg_kernels

    return pcg_kernels


def _ints(values: np.ndarray) -> np.ndarray:
    """``values`` as a contiguous int64 array (what the compiled loops take)."""
    return np.ascontiguousarray(values, dtype=np.int64)


def _key(seed: int) -> np.ndarray:
    return np.array([seed & MASK32, (seed >> 32) & MASK32], dtype=np.int64)


def counter_negatives(
    seed: int,
    stream: int,
    server_round: int,
    users: np.ndarray,
    sizes: np.ndarray,
    counts: np.ndarray,
    exclusions: np.ndarray,
    num_items: int,
    max_attempts: int,
) -> np.ndarray:
    """The draws of :func:`fedrec_flwr.node.counter_rng.counter_negatives` (its checks
    made by the caller)."""
    counter = np.array([server_round & MASK32, stream << 16], dtype=np.int64)
    out, failed = _kernels().negatives(
        _key(seed),
        counter,
        _ints(users),
        _ints(sizes),
        _ints(counts),
        _ints(exclusions),
        int(num_items),
        int(max_attempts),
    )
    if failed:
        raise RuntimeError(f"negative draws still excluded after {max_attempts} attempts")
    return out


def shuffled_order(
    seed: int, stream: int, users: np.ndarray, counts: np.ndarray, server_round: int, tag: int
) -> np.ndarray:
    """The order of :func:`fedrec_flwr.node.lockstep.shuffled_order`."""
    counter = np.array([server_round & MASK32, (stream << 16) + tag], dtype=np.int64)
    return _kernels().shuffled(
        _key(seed),
        counter,
        _ints(users),
        _ints(counts),
    )


def user_rows(
    offsets: np.ndarray, items: np.ndarray, num_items: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each user's number of distinct items, those items (sorted, users in order), each
    entry's place among them) for user ``j`` owning ``items[offsets[j]:offsets[j+1]]``."""
    found, inverse, row_counts = _kernels().distinct(
        _ints(offsets),
        _ints(items),
        int(num_items),
    )
    return row_counts, found, inverse


def float64_row_sums(inverse: np.ndarray, rows: np.ndarray, num_out: int) -> np.ndarray:
    """``out[inverse[k]] += rows[k]`` in float64, rows in order."""
    return _kernels().row_sums(
        _ints(inverse),
        np.ascontiguousarray(rows, dtype=np.float32),
        int(num_out),
    )


def repeated_entries(rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Indices of the entries whose row occurs more than once in ``rows`` (int64), in order;
    ``counts``: an int64 scratch of zeros over the table's rows (left zero)."""
    return _kernels().repeated_entries(rows, counts)


def batch_entries(
    base: np.ndarray,
    start: np.ndarray,
    size: np.ndarray,
    source: np.ndarray,
    sample_rows: np.ndarray,
    sample_labels: np.ndarray,
    total: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(rows int64, labels float32) of ``total`` entries: batch ``b``'s ``size[b]`` samples,
    the flat samples ``source[start[b]:start[b] + size[b]]``, at entries ``base[b]`` on;
    zero elsewhere."""
    return _kernels().batch_entries(
        _ints(base),
        _ints(start),
        _ints(size),
        _ints(source),
        _ints(sample_rows),
        np.ascontiguousarray(sample_labels, dtype=np.float32),
        int(total),
    )


def add_rows(table: np.ndarray, index: np.ndarray, source: np.ndarray, alpha: float) -> None:
    """``table[index[k]] += alpha * source[k]`` in place, entries in order, one fused
    multiply-add per value (C-contiguous float32 [*, r] ``table`` and ``source``)."""
    _kernels().add_rows(table, _ints(index), source, np.float32(alpha))


def add_outer_rows(
    table: np.ndarray, index: np.ndarray, scale: np.ndarray, vector: np.ndarray, alpha: float
) -> None:
    """:func:`add_rows` of the source ``scale[u, b] * vector[u]`` (float32 products) at entry
    ``u * B + b`` (C-contiguous float32 ``table`` [*, r], ``scale`` [a, B], ``vector``
    [a, r]), without the source's tensor."""
    _kernels().add_outer_rows(table, _ints(index), scale, vector, np.float32(alpha))


def candidate_rows(
    offsets: np.ndarray, items: np.ndarray, candidates: np.ndarray, num_items: int
) -> np.ndarray:
    """Mask of the rows of user ``j`` (``items[offsets[j]:offsets[j + 1]]``, item ids below
    ``num_items``) that are among its candidates ``candidates[j]``."""
    return _kernels().candidate_rows(
        _ints(offsets),
        _ints(items),
        _ints(candidates),
        int(num_items),
    )


def keyed_negatives(
    states: np.ndarray,
    sizes: np.ndarray,
    counts: np.ndarray,
    exclusions: np.ndarray,
    num_items: int,
) -> np.ndarray:
    """Each user's ``sample_excluding(rng, num_items, excluded, size)`` from its generator's
    PCG64 state (``states[j]``, :func:`fedrec_flwr.seeding.keyed_pcg64_states`), users
    after one another; user ``j``'s ``counts[j]`` sorted exclusions next in ``exclusions``
    (fewer than ``num_items``)."""
    return _pcg().negatives(
        np.ascontiguousarray(states, dtype=np.uint64),
        _ints(sizes),
        _ints(counts),
        _ints(exclusions),
        int(num_items),
    )


def keyed_permutations(states: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each user's ``rng.permutation(counts[j])`` from its generator's PCG64 state,
    users after one another."""
    return _pcg().permutations(
        np.ascontiguousarray(states, dtype=np.uint64),
        _ints(counts),
    )


def stored_pairs(
    indptr: np.ndarray, stored: np.ndarray, positions: np.ndarray, items: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(storage index, held mask) of (position, item) pairs in the CSR store ``indptr``,
    ``stored`` (each position's items sorted); the index is 0 where not held."""
    return _kernels().stored_pairs(_ints(indptr), _ints(stored), _ints(positions), _ints(items))


def pair_positions(
    owner: np.ndarray, items: np.ndarray, wanted: np.ndarray, num_items: int
) -> np.ndarray:
    """:func:`fedrec_flwr.node.rank_entries.pair_where`: each user's items marked in a
    scratch array over the items, its wanted items read from it."""
    bounds = np.searchsorted(owner, np.arange(wanted.shape[0] + 1))
    slots = np.full(num_items, -1, dtype=np.int64)
    out = np.empty(wanted.shape, dtype=np.int64)
    _kernels().pair_positions(_ints(bounds), _ints(items), _ints(wanted), slots, out)
    return out


def rows_into(order: np.ndarray, source: np.ndarray, local: np.ndarray, out: np.ndarray) -> None:
    """``out[order] = source[local]`` (rows of a 2-D ``source``, C-contiguous ``out`` of its
    dtype), each row copied where it goes: no temporary of the rows taken."""
    source = np.ascontiguousarray(source)
    _kernels().rows_into(_ints(order), source, _ints(local), out)


def user_entries(
    bounds: np.ndarray,
    items: np.ndarray,
    part_flags: np.ndarray,
    held_part: int,
    scores: np.ndarray,
    num_items: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`fedrec_flwr.node.rank_entries.entries_of`'s (owner, item, flags, own score)
    of its parts laid end to end in ``items`` (part ``p``'s entries of user ``j``:
    ``bounds[p, j]:bounds[p, j + 1]``; part ``held_part``'s entries have ``scores``): each
    user's items marked in a scratch bitmap, read back sorted."""
    return _ranks().user_entries(
        _ints(bounds),
        _ints(items),
        np.ascontiguousarray(part_flags, dtype=np.uint8),
        int(held_part),
        np.ascontiguousarray(scores, dtype=np.float32),
        int(num_items),
    )


def entry_ranks(
    entries,
    counted: Sequence[np.ndarray],
    targets: np.ndarray,
    above: np.ndarray,
    out_flags: tuple[int, int],
    held_flag: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Both splits' :func:`fedrec_flwr.node.rank_entries.full_ranks` counts (int64
    ``[users, 2]``) and excluded entries per user (idem) from the
    :class:`~fedrec_flwr.node.rank_entries.Entries` ``entries``, in one pass: each entry
    counted where it stands, with no mask or count array the size of the entries."""
    return _ranks().entry_ranks(
        _ints(entries.owner),
        np.ascontiguousarray(entries.flags, dtype=np.uint8),
        np.ascontiguousarray(entries.personal),
        np.ascontiguousarray(counted[0], dtype=np.bool_),
        np.ascontiguousarray(counted[1], dtype=np.bool_),
        np.ascontiguousarray(targets),
        _ints(above),
        np.asarray(out_flags, dtype=np.uint8),
        int(held_flag),
    )


def sampled_counts(
    entries,
    sample: np.ndarray,
    beaten: np.ndarray,
    targets: np.ndarray,
    held_flag: int,
    half: int,
    num_items: int,
) -> np.ndarray:
    """Per user and split (int64 ``[users, 2]``; split 0: the first ``half`` columns of
    ``sample``) the sampled negatives that beat the target
    (:func:`fedrec_flwr.node.rank_entries.sampled_ranks`): the scan's ``beaten``, or the
    own score of an item the user holds (its entries marked in a scratch map over the
    items, one user at a time)."""
    sample = _ints(sample)
    bounds = np.searchsorted(entries.owner, np.arange(sample.shape[0] + 1))
    return _ranks().sampled_counts(
        _ints(bounds),
        _ints(entries.items),
        np.ascontiguousarray(entries.flags, dtype=np.uint8),
        np.ascontiguousarray(entries.personal),
        sample,
        np.ascontiguousarray(beaten, dtype=np.bool_),
        np.ascontiguousarray(targets),
        int(held_flag),
        int(half),
        np.full(num_items, -1, dtype=np.int64),
    )


def scan_beats(
    entry_scores: np.ndarray,
    owner: np.ndarray,
    sample_scores: np.ndarray,
    targets: np.ndarray,
    half: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each entry beats its owner's validation target, its test target, each sampled
    negative beats its split's target; split 0: the first ``half`` columns): ``beats`` of
    fixed-order scores (:mod:`fedrec_flwr.node.fixed_order_scan`) in one compiled pass."""
    entries = (np.empty(len(entry_scores), np.bool_), np.empty(len(entry_scores), np.bool_))
    sample = np.empty(sample_scores.shape, np.bool_)
    _ranks().scan_beats(
        np.ascontiguousarray(entry_scores),
        _ints(owner),
        np.ascontiguousarray(sample_scores),
        np.ascontiguousarray(targets),
        int(half),
        *entries,
        sample,
    )
    return entries[0], entries[1], sample
