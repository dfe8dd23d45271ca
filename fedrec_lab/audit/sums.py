"""What the server of an item-item method learns (``fedrec audit --sums PRESET ...``).

No attack is run: what each configuration reveals follows from what the server receives,
computed from the data the way the run computes its sums
(:mod:`fedrec_flwr.server.statistics`):

- plain: every user's uploaded items (its train positives, at most ``itemitem-max-degree``
  under the sampled degree bound, all of them under the scaled one), each list as its node
  sent it;
- secure aggregation: the sum only, that is the count of every item and of every pair of items
  over the released coordinates (the catalogue; with ``itemitem-min-count`` > 1, a first sum
  of the counts of every item, weighted under the scaled degree bound, then the pairs over
  the support). The sum still singles users
  out: the row of an item that one user alone holds *is* that user's whole uploaded list (as
  an anonymous row), and a pair one user alone holds tells that someone holds both;
- with ``itemitem-dp-epsilon``: the released sums are (epsilon, delta)-DP for each user
  (``summary.json``'s ``dp_user_level``): the counts above are what the server saw before it
  added the noise, not what the model tells anyone else.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.methods import build_method
from fedrec_flwr.methods.itemitem import ItemItem, ItemItemKeys
from fedrec_flwr.privacy.secagg import SecAggKeys
from fedrec_flwr.privacy.sum_noise import SumNoise
from fedrec_lab.presets import resolve
from fedrec_lab.project import conf_dir


def revealed(preset: str, data_dir: str) -> dict:
    """What the server of ``preset``'s run learns (see the module doc)."""
    config = RunConfig.from_mapping(
        {**resolve(conf_dir() / f"{preset}.toml"), **({"data-dir": data_dir} if data_dir else {})}
    )
    prepared = prepare(config)
    method = build_method(config, prepared.num_items)
    if not isinstance(method, ItemItem):
        raise ValueError(f"{preset}: the sums' audit reads an item-item preset's uploads")
    baskets = [method.uploaded_items(prepared, u) for u in range(prepared.num_users)]
    counts = np.zeros(prepared.num_items, dtype=np.int64)
    support = np.zeros(prepared.num_items, dtype=np.float64)  # the run's (weighted) counts
    for basket in baskets:
        counts[basket] += 1
        support[basket] += method.count_weight(len(basket))
    coords = np.flatnonzero(support >= max(config.group(ItemItemKeys).itemitem_min_count, 1))
    if not config.group(SecAggKeys).secure_aggregation:
        coords = np.flatnonzero(counts > 0)
    inside = np.zeros(prepared.num_items, dtype=bool)
    inside[coords] = True
    alone = inside & (counts == 1)  # items one user alone holds, among the released ones
    whole = sum(bool(alone[b].any()) for b in baskets)  # users whose list is such a row
    pairs = lone_pairs(baskets, inside, prepared.num_items)
    noise = SumNoise.of(config)
    record = {
        "preset": preset,
        "dataset": config.data.dataset,
        "users": prepared.num_users,
        "items": prepared.num_items,
        "secure": bool(config.group(SecAggKeys).secure_aggregation),
        "uploaded": int(sum(len(b) for b in baskets)),
        "released_items": len(coords),
        "lone_items": int(alone.sum()),
        "users_whole_list": int(whole),
        "lone_pairs": int(pairs),
        "epsilon": None if noise is None else noise.record()["epsilon"],
    }
    return record


def lone_pairs(baskets: list[np.ndarray], inside: np.ndarray, num_items: int) -> int:
    """Pairs of released items (i < j) exactly one user holds."""
    keys = []
    for basket in baskets:
        kept = basket[inside[basket]]
        first, second = np.triu_indices(len(kept), 1)
        keys.append(kept[first] * num_items + kept[second])
    if not keys:
        return 0
    _, times = np.unique(np.concatenate(keys), return_counts=True)
    return int((times == 1).sum())


def markdown(command: str, rows: list[dict]) -> str:
    lines = [
        "# What the server of an item-item run learns",
        "",
        f"```bash\n{command}\n```",
        "",
        "| preset | users x items | the server receives | interactions it sees per user "
        "| items one user alone holds (released) | users whose whole list is such an item's row "
        "| item pairs one user alone holds | model's epsilon |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["secure"]:
            receives = f"the sums over {r['released_items']:,} items"
            sees = "none (the sums only)"
            lone = f"{r['lone_items']:,}"
            whole = f"{r['users_whole_list']:,} ({100 * r['users_whole_list'] / r['users']:.1f} %)"
            pairs = f"{r['lone_pairs']:,}"
        else:
            receives = "each user's item list"
            sees = f"all it uploads ({r['uploaded']:,} in all)"
            lone = whole = pairs = "- (it sees the lists)"
        epsilon = "-" if r["epsilon"] is None else f"{r['epsilon']:.3g}"
        lines.append(
            f"| {r['preset']} | {r['users']:,} x {r['items']:,} | {receives} | {sees} | {lone} "
            f"| {whole} | {pairs} | {epsilon} |"
        )
    lines += [
        "",
        "An item one user alone holds makes its row of the summed co-occurrences that user's "
        "whole uploaded list (without the user's name); a pair one user alone holds says that "
        "someone holds both. With `itemitem-min-count` > 1 the co-occurrences cover only the "
        "items at least that many users hold (the counts of every item are summed first). "
        "Epsilon: the user-level guarantee of the released sums (`itemitem-dp-epsilon`): what "
        "the model tells anyone who sees it, not what the server saw before adding the noise.",
        "",
    ]
    return "\n".join(lines)


def write(presets: list[str], data_dir: str, out: Path, tag: str, command: str) -> Path:
    rows = [revealed(preset, data_dir) for preset in presets]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{tag}.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1))
    (out / f"{tag}.md").write_text(markdown(command, rows))
    return out / f"{tag}.md"
