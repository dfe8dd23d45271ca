"""The compiled loops of a full ranking's host side (numba, cached on disk where numba can
write its cache), for :mod:`fedrec_flwr.node.host_loops`: each user's entries from a bitmap
over the items (:func:`user_entries`), both splits' ranks counted entry by entry
(:func:`entry_ranks`) and among the sampled negatives (:func:`sampled_counts`). Imported on
first use."""

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
    return owner[:total], found[:total], flags[:total], personal[:total]  # no copies


@jit
def entry_ranks(owner, flags, personal, counted0, counted1, targets, above, out_flags, held_flag):
    """Both splits' full ranks (``[users, 2]``; split ``k``'s scan decisions ``counted<k>``,
    its excluded flags ``out_flags[k]``) in one pass over the entries: ``above`` plus, entry
    by entry, what the entry counts anew (its own score beats the target where it is held,
    else what the scan counted; none where its flags meet the split's) less what the scan
    counted; and each split's excluded entries per user (for a NaN target's rank)."""
    rank = above.copy()
    excluded = np.zeros(above.shape, dtype=np.int64)
    for e in range(len(owner)):
        user, flag = owner[e], flags[e]
        held = flag & held_flag
        score = personal[e]
        for k in range(2):
            was = counted0[e] if k == 0 else counted1[e]
            now = was
            if held:
                now = score >= targets[user, k] or score != score
            if flag & out_flags[k]:
                now = False
                excluded[user, k] += 1
            rank[user, k] += np.int64(now) - np.int64(was)
    return rank, excluded


@jit
def sampled_counts(bounds, items, flags, personal, sample, beaten, targets, held_flag, half, slots):
    """Per user and split (``[users, 2]``; split 0 the first ``half`` columns of
    ``sample``) the sampled negatives that beat the target: the scan's decision
    ``beaten[j, s]``, or where the user holds the item (its entry found in ``slots``, a
    scratch map over the items, all -1 before and after) its own score's."""
    counts = np.zeros((sample.shape[0], 2), dtype=np.int64)
    for j in range(sample.shape[0]):
        for k in range(bounds[j], bounds[j + 1]):
            slots[items[k]] = k
        for s in range(sample.shape[1]):
            split = 0 if s < half else 1
            now = beaten[j, s]
            e = slots[sample[j, s]]
            if e >= 0 and flags[e] & held_flag:
                score = personal[e]
                now = score >= targets[j, split] or score != score
            counts[j, split] += np.int64(now)
        for k in range(bounds[j], bounds[j + 1]):
            slots[items[k]] = -1
    return counts


@jit
def scan_beats(entry_scores, owner, sample_scores, targets, half, entries0, entries1, sample):
    """The fixed-order scan's comparisons (``beats``: at least the target, or NaN): each
    entry's score against its owner's two targets, each sampled negative's (``sample``
    ``[users, width]``) against its split's (split 0: the first ``half`` columns)."""
    for e in range(len(entry_scores)):
        score, user = entry_scores[e], owner[e]
        nan = score != score
        entries0[e] = score >= targets[user, 0] or nan
        entries1[e] = score >= targets[user, 1] or nan
    for j in range(sample_scores.shape[0]):
        for s in range(sample_scores.shape[1]):
            score = sample_scores[j, s]
            target = targets[j, 0] if s < half else targets[j, 1]
            sample[j, s] = score >= target or score != score
