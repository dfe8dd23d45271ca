"""Item-item settings on validation: every cell of a grid of ``itemitem`` keys, through the
method's own server code (the users' uploads of one round, summed, noised if asked, and
the model computed by :class:`~fedrec_flwr.server.statistics.StatisticsModel`), scored by
the methods' evaluation code (:func:`fedrec_lab.baselines.scoring.evaluate_scores`). A
cell is the federated run's round 1 without the messages: the same sums, the same model (with
``secure-aggregation`` and ``itemitem-min-count`` > 1, its rounds 1 and 2: the counts, then the
co-occurrences over the support).

    python bench/itemitem_grid.py --data-dir DIR --dataset ml-100k --set itemitem-model=gfcf \\
        --grid itemitem-rank=16,32,64,128,256 itemitem-alpha=0.3,1,2,5,10 \\
        --write bench/results/itemitem-grid/gfcf-ml100k

Writes ``<write>.json`` (every cell) and ``<write>.md`` (the table, the cell with the best
validation HR@10 first among ties in grid order).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import tomllib
from pathlib import Path

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.methods import build_method
from fedrec_flwr.methods.itemitem import two_rounds
from fedrec_flwr.node.statistics import positions_in
from fedrec_flwr.server.statistics import StatisticsModel, StatisticsUpload, secure_statistics
from fedrec_lab.baselines.scoring import evaluate_scores


def value(text: str):
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


#: What the cells of one run share: the prepared data and histories (keyed by the run's
#: keys other than the item-item ones), the uploads (and by the degree bound).
_DATA: dict[tuple, tuple] = {}
_UPLOADS: dict[tuple, StatisticsUpload] = {}


def shared_data(mapping: dict) -> tuple:
    """(prepared data, users' train histories) of the cell's data keys, computed once."""
    key = tuple(sorted((k, str(v)) for k, v in mapping.items() if not k.startswith("itemitem-")))
    if key not in _DATA:
        prepared = prepare(RunConfig.from_mapping(mapping))
        history = np.zeros((prepared.num_users, prepared.num_items), dtype=np.float32)
        for user in range(prepared.num_users):
            history[user, prepared.train_positives(user)] = 1.0
        _DATA[key] = (key, prepared, history)
    return _DATA[key]


def cell_metrics(mapping: dict) -> tuple[dict, dict]:
    """(validation, test) metrics of one setting: every user's upload of round 1, summed."""
    config = RunConfig.from_mapping(mapping)
    data_key, prepared, history = shared_data(mapping)
    method = build_method(config, prepared.num_items)
    upload_key = (*data_key, method.upload_limit)
    if upload_key not in _UPLOADS:
        baskets = [method.uploaded_items(prepared, u) for u in range(prepared.num_users)]
        _UPLOADS[upload_key] = StatisticsUpload(
            prepared.num_users,
            np.concatenate(baskets),
            np.r_[0, np.cumsum([len(b) for b in baskets])].astype(np.int64),
        )
    model = StatisticsModel(config, method, prepared.num_items)
    if two_rounds(config):
        secure_rounds(model, _UPLOADS[upload_key])
    else:
        model.start_round()
        model.apply([_UPLOADS[upload_key]])
    covered = np.flatnonzero(model.table.any(axis=0))  # rows of W outside the support are 0
    weights = model.table.T[covered].astype(np.float64)
    metrics = evaluate_scores(
        config, prepared, lambda users: history[np.ix_(users, covered)] @ weights
    )
    record = model.dp_record()
    return metrics, {} if record is None else record


def secure_rounds(model: StatisticsModel, upload: StatisticsUpload) -> None:
    """A two-round secure run's rounds 1 and 2 (``secure-aggregation`` with
    ``itemitem-min-count`` > 1): the users' vectors of the counts, then of the co-occurrences
    over the support the released counts fixed, each round's sum encoded and decoded as the
    nodes and the server do (the noise keyed by the same rounds)."""
    assert upload.items is not None and upload.offsets is not None
    baskets = [upload.items[lo:hi] for lo, hi in itertools.pairwise(upload.offsets)]
    weights = [model.method.basket_weight(len(b)) for b in baskets]
    for _ in range(2):
        model.start_round()
        layout = model.secure_layout()
        coords = baskets
        if model.support is not None:
            coords = [positions_in(model.support, b) for b in baskets]
        total = layout.encode(coords, weights, upload.num_users)
        model.apply([secure_statistics(total, layout)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--protocol", default="strict")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--grid", nargs="+", required=True, metavar="KEY=V1,V2")
    parser.add_argument("--write", required=True, help="<write>.json and <write>.md")
    parser.add_argument(
        "--best-per",
        default="",
        metavar="KEY",
        help="mark the best validation cell among each value of this grid key (default: one)",
    )
    args = parser.parse_args()
    if args.best_per and args.best_per not in {g.split("=", 1)[0] for g in args.grid}:
        parser.error(f"--best-per {args.best_per}: not a --grid key")
    fixed = {k: value(v) for k, v in (pair.split("=", 1) for pair in args.set)}
    grid = {k: [value(x) for x in v.split(",")] for k, v in (g.split("=", 1) for g in args.grid)}
    base = {
        "method": "itemitem",
        "dataset": args.dataset,
        "protocol": args.protocol,
        "data-dir": args.data_dir,
        **fixed,
    }
    cells = []
    for values in itertools.product(*grid.values()):
        setting = dict(zip(grid, values, strict=True))
        for seed in args.seeds:
            started = time.perf_counter()
            metrics, dp = cell_metrics({**base, **setting, "seed": seed})
            cells.append(
                {
                    **setting,
                    "seed": seed,
                    "val-hr@10": metrics["val"]["hr@10"],
                    "test-hr@10": metrics["test"]["hr@10"],
                    "test-ndcg@10": metrics["test"]["ndcg@10"],
                    "seconds": round(time.perf_counter() - started, 1),
                    **({"epsilon": dp["epsilon"], "noise-std": dp["gram_noise_std"]} if dp else {}),
                }
            )
            print(json.dumps(cells[-1]), flush=True)
    command = (
        f"python bench/itemitem_grid.py --data-dir DIR --dataset {args.dataset}"
        + (f" --protocol {args.protocol}" if args.protocol != "strict" else "")
        + (f" --seeds {' '.join(map(str, args.seeds))}" if args.seeds != [0] else "")
        + (f" --set {' '.join(args.set)}" if args.set else "")
        + f" --grid {' '.join(args.grid)} --write {args.write}"
        + (f" --best-per {args.best_per}" if args.best_per else "")
    )
    out = Path(args.write)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(
        json.dumps({"command": command, "fixed": fixed, "cells": cells}, indent=2) + "\n"
    )
    out.with_suffix(".md").write_text(markdown(command, fixed, grid, cells, args.best_per))
    print(f"wrote {out}.md")


def markdown(command: str, fixed: dict, grid: dict, cells: list[dict], best_per: str = "") -> str:
    keys = list(grid)
    settings = []
    for values in itertools.product(*grid.values()):
        rows = [c for c in cells if all(c[k] == v for k, v in zip(keys, values, strict=True))]
        settings.append((dict(zip(keys, values, strict=True)), rows))

    def mean(rows, name):
        return 100 * float(np.mean([r[name] for r in rows]))

    def group(i: int):
        return settings[i][0][best_per] if best_per else None

    best = {
        max(
            (i for i in range(len(settings)) if group(i) == g),
            key=lambda i: (mean(settings[i][1], "val-hr@10"), -i),
        )
        for g in {group(i) for i in range(len(settings))}
    }
    has_dp = any("epsilon" in c for c in cells)
    head = [*keys, "seeds", "val HR@10", "test HR@10", "test NDCG@10"]
    head += ["epsilon", "noise std"] if has_dp else []
    lines = [
        f"# Item-item settings on validation: {', '.join(f'{k} = {v}' for k, v in fixed.items())}",
        "",
        f"```bash\n{command}\n```",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for index, (setting, rows) in enumerate(settings):
        mark = " (best validation)" if index in best else ""
        row = [*(str(setting[k]) for k in keys), str(len(rows))]
        row += [f"{mean(rows, 'val-hr@10'):.2f}{mark}", f"{mean(rows, 'test-hr@10'):.2f}"]
        row += [f"{mean(rows, 'test-ndcg@10'):.2f}"]
        if has_dp:
            row += [f"{rows[0]['epsilon']:.3g}", f"{rows[0]['noise-std']:.3g}"]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Metrics (%) under the protocol, means over the seeds; the sums are those of a "
        "federated run's round 1 (every user's upload), the model the server's."
        + (f" The best validation cell is marked for each {best_per}." if best_per else ""),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
