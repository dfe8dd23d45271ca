"""The compiled loops of a full ranking's host side (numba, cached on disk where numba can
write its cache), for :mod:`fedrec_flwr.node.host_loops`: each user's entries from a bitmap
over the items (:func:`user_entries`) and one split's ranks counted entry by entry
(:func:`entry_ranks`). Imported on first use."""

from __future__ import annotations

import numpy as np

from fedrec_flwr.node.host_kernels import ONE, jit, lowest_bit


@jit
def user_entries(bounds, items, part_flags, held_part, scores, num_items):
    """Each user's distinct entries (users in order, items sorted) over the parts of
    ``items`` (part ``p``'s entries of user ``j``: ``bounds[p, j]:bounds[p, j + 1]``), each
    with its parts' flags OR-ed and, where part ``held_part`` holds it, its score (else NaN):
    the items marked in a bitmap, read back in order."""
    users = bounds.shape[1] - 1
    bits = np.zeros((num_items + 63) >> 6, dtype=np.uint64)
    marks = np.zeros(num_items, dtype=np.uint8)
    own = np.empty(num_items, dtype=np.float32)
    owner = np.empty(len(items), dtype=np.int64)
    found = np.empty(len(items), dtype=np.int64)
    flags = np.empty(len(items), dtype=np.uint8)
    personal = np.empty(len(items), dtype=np.float32)
    held_start, total = bounds[held_part, 0], 0
    for j in range(users):
        low, high = len(bits), -1
        for p in range(bounds.shape[0]):
            for k in range(bounds[p, j], bounds[p, j + 1]):
                item = items[k]
                word = item >> 6
                bits[word] |= ONE << np.uint64(item & 63)
                low, high = min(low, word), max(high, word)
                marks[item] |= part_flags[p]
                if p == held_part:
                    own[item] = scores[k - held_start]
        for word in range(low, high + 1):
            left = bits[word]
            while left:
                item = (word << 6) + lowest_bit(left)
                owner[total], found[total], flags[total] = j, item, marks[item]
                held = marks[item] & part_flags[held_part]
                personal[total] = own[item] if held else np.float32(np.nan)
                marks[item] = 0
                left &= left - ONE
                total += 1
            bits[word] = 0
    return owner[:total].copy(), found[:total].copy(), flags[:total].copy(), personal[:total].copy()


@jit
def entry_ranks(owner, flags, personal, counted, target, above, out_flags, held_flag, num_items):
    """One split's full ranks: ``above`` plus, entry by entry, what the entry counts anew
    (its own score beats ``target`` where it is held, else what the scan ``counted``; none
    where its flags meet ``out_flags``) less what the scan counted; the valid items where
    the target is NaN."""
    rank = above.copy()
    excluded = np.zeros(len(target), dtype=np.int64)
    for e in range(len(owner)):
        user, flag, was = owner[e], flags[e], counted[e]
        now = was
        if flag & held_flag:
            score = personal[e]
            now = score >= target[user] or score != score
        if flag & out_flags:
            now = False
            excluded[user] += 1
        rank[user] += np.int64(now) - np.int64(was)
    for user in range(len(target)):
        if target[user] != target[user]:
            rank[user] = num_items - excluded[user]
    return rank
