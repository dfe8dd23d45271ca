"""The study's report (markdown), the default presets it writes, and its command as shown."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from fedrec_lab.project import conf_dir
from fedrec_lab.transfer.cells import DATASETS, DEFAULT, SOURCES, candidate_keys
from fedrec_lab.transfer.choice import PATIENCES


def pct(value: float) -> str:
    return f"{100 * value:.2f}"


def interval(low: float, high: float) -> str:
    return f"[{100 * low:.2f}, {100 * high:.2f}]"


def signed_interval(d: dict[str, float]) -> str:
    return f"{100 * d['mean']:+.2f} [{100 * d['low']:+.2f}, {100 * d['high']:+.2f}]"


def setting(method: str, candidate: str) -> str:
    """A candidate as the report names it: ``tuned on ML-100K``, or for :data:`DEFAULT`
    (tuned on none of the datasets) its preset, ``conf/<method>-default.toml``."""
    if candidate == DEFAULT:
        return f"`conf/{method}-default.toml`"
    return f"tuned on {DATASETS[candidate]['label']}"


def markdown(summary: dict[str, Any], command: str, settings: dict[str, Any]) -> str:
    """The report: the transfer table, the leave-one-dataset-out choice, defaults vs ItemKNN."""
    label = {k: v["label"] for k, v in DATASETS.items()}
    rows, knn = summary["rows"], summary["itemknn"]
    out = [
        "# Settings that transfer: presets scored on datasets they were not tuned on",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Strict protocol, seed {settings['seed']}, {settings['rounds']} rounds, "
        + (
            f"early stopping after {settings['patience']} evaluated rounds without a better "
            "validation HR@10"
            if settings["patience"]
            else "every round evaluated, no early stopping"
        )
        + "; test HR@10 (%) at the best validation round. A setting is a strict preset's "
        "method keys with the target's dataset keys. Intervals: 95 % bootstrap over users; "
        "differences paired over the same users. The reference on a dataset is the preset tuned "
        "on it; on the generated data, which has no tuned preset, the best setting measured "
        'there (marked *best measured*). Generated data: `dataset = "synthetic"`, '
        + ", ".join(
            f"`{k} = {v}`" for k, v in DATASETS["synthetic"]["keys"].items() if k != "dataset"
        )
        + "."
        + "".join(
            f" The cell {row['method']} on {label[row['target']]} is the committed run "
            f"`{row['run']}`."
            for row in rows
            if "(device " in (row.get("run") or "")
        ),
        "",
        "| method | dataset | setting | test HR@10 | 95 % CI (users) | minus reference, points "
        "[95 % CI] | ratio to reference | best round / rounds run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    order = list(label)
    for row in sorted(
        rows,
        key=lambda r: (r["method"], order.index(r["target"]), r["candidate"] != r["target"]),
    ):
        own = row["candidate"] == row["target"]
        name = setting(row["method"], row["candidate"]) + (" (own)" if own else "")
        if row["candidate"] == row["reference"] and not row["reference_tuned"]:
            name += " (best measured)"
        diff = "-" if row["candidate"] == row["reference"] else signed_interval(row["vs_reference"])
        out.append(
            f"| {row['method']} | {label[row['target']]} | {name} | {pct(row['test_hr10'])} "
            f"| {interval(*row['ci'])} | {diff} | {row['ratio']:.3f} "
            f"| {row['best_round']} / {row['rounds']} |"
        )
    for target, cell in knn.items():
        out.append(
            f"| ItemKNN, cosine (centralized, {cell['candidate']}) | {label[target]} | tuned on "
            f"its validation | {pct(cell['test_hr10'])} | {interval(*cell['ci'])} | - | - | - |"
        )
    out += [
        "",
        "Leave-one-dataset-out: a setting tuned on one dataset is scored on the others "
        "(held out); its worst ratio to the reference there decides. The chosen one is "
        "`conf/<method>-default.toml`"
        + (
            "; a default preset scored as a setting was tuned on none of them, so every "
            "dataset is held out for it."
            if any(r["candidate"] == DEFAULT for r in rows)
            else "."
        ),
        "",
        "| method | setting | held-out datasets | worst ratio | mean ratio | default |",
        "|---|---|---|---|---|---|",
    ]
    for choice in summary["choices"]:
        for cand in choice["candidates"]:
            out.append(
                f"| {choice['method']} | {setting(choice['method'], cand['candidate'])} "
                f"| {', '.join(label[t] for t in cand['held_out'])} | {cand['worst_ratio']:.3f} "
                f"| {cand['mean_ratio']:.3f} "
                f"| {'yes' if cand['candidate'] == choice['default'] else ''} |"
            )
    out += [
        "",
        "Each method's default against ItemKNN on the same users (test HR@10 points, the "
        "default minus ItemKNN; *own* where the default was tuned on that dataset):",
        "",
        "| dataset | method | default | test HR@10 | ItemKNN | minus ItemKNN [95 % CI] |",
        "|---|---|---|---|---|---|",
    ]
    for target in knn:
        for choice in summary["choices"]:
            match = [
                r
                for r in rows
                if r["method"] == choice["method"]
                and r["target"] == target
                and r["candidate"] == choice["default"]
            ]
            for row in match:
                own = " (own)" if row["candidate"] == target else ""
                out.append(
                    f"| {label[target]} | {row['method']} | "
                    f"{setting(row['method'], row['candidate'])}{own} | {pct(row['test_hr10'])} "
                    f"| {pct(knn[target]['test_hr10'])} | {signed_interval(row['vs_itemknn'])} |"
                )
    out += [
        "",
        "The best default on each dataset, and the best default tuned on another dataset "
        "(transferred), against ItemKNN:",
        "",
        "| dataset | best default | test HR@10 | minus ItemKNN [95 % CI] "
        "| best transferred default "
        "| test HR@10 | minus ItemKNN [95 % CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    chosen = {(c["method"], c["default"]) for c in summary["choices"]}
    for target in knn:
        defaults = [
            r for r in rows if (r["method"], r["candidate"]) in chosen and r["target"] == target
        ]
        moved = [r for r in defaults if r["candidate"] != target]
        line = [label[target]]
        for group in (defaults, moved):
            if group:
                best = max(group, key=lambda r: r["test_hr10"])
                line += [
                    f"{best['method']} ({setting(best['method'], best['candidate'])})",
                    pct(best["test_hr10"]),
                    signed_interval(best["vs_itemknn"]),
                ]
            else:
                line += ["-", "-", "-"]
        out.append("| " + " | ".join(line) + " |")
    if summary.get("early_stopping"):
        out += early_stopping_markdown(summary["early_stopping"])
    return "\n".join(out) + "\n"


def early_stopping_markdown(rows: list[dict[str, Any]]) -> list[str]:
    label = {k: v["label"] for k, v in DATASETS.items()}
    head = " | ".join(f"patience {p}" for p in PATIENCES)
    out = [
        "",
        "Early stopping as a default: each tuned preset's committed run (`bench/results/runs/`, "
        "100 rounds, every round evaluated), and where `early-stopping-patience` would have "
        "ended it (a stopped run is that run cut short). Test HR@10 (best round / rounds run):",
        "",
        f"| method | dataset | no early stopping | {head} |",
        "|---|---|---|" + "---|" * len(PATIENCES),
    ]
    for row in rows:
        cells = [
            f"{pct(c['test_hr10'])} ({c['best_round']} / {c['rounds']})"
            for c in row["patience"].values()
        ]
        out.append(f"| {row['method']} | {label[row['dataset']]} | {' | '.join(cells)} |")
    return out


def own_default(method: str) -> bool:
    """Whether ``conf/<method>-default.toml`` is a setting of its own: the method keys of no
    tuned strict preset (early stopping aside), so that only a study scoring it may replace it."""
    folder = conf_dir()

    def method_keys(candidate: str) -> dict[str, Any]:
        keys = candidate_keys(method, candidate, folder)
        return {k: v for k, v in keys.items() if k != "early-stopping-patience"}

    if not (folder / f"{method}-default.toml").is_file():
        return False
    tuned = [s for s in SOURCES if (folder / f"{method}-{s}-strict.toml").is_file()]
    return method_keys(DEFAULT) not in [method_keys(source) for source in tuned]


def write_default_presets(summary: dict[str, Any], command: str, patience: int) -> list[Path]:
    """``conf/<method>-default.toml``: the chosen setting's method keys, no dataset key, and
    early stopping as measured."""
    written = []
    label = {k: v["label"] for k, v in DATASETS.items()}
    for choice in summary["choices"]:
        method, source = choice["method"], choice["default"]
        if source == DEFAULT:
            continue  # the default preset itself is the best: it stays as it is
        scored = {c["candidate"] for c in choice["candidates"]}
        if DEFAULT not in scored and own_default(method):
            print(
                f"conf/{method}-default.toml is a setting of its own (no tuned preset's keys) "
                "that this study did not score: left as it is; add `default` to --candidates "
                "to score it against the tuned presets",
                file=sys.stderr,
            )
            continue
        keys = candidate_keys(method, source, conf_dir())
        worst = next(c for c in choice["candidates"] if c["candidate"] == source)
        lines = [
            f"# {method}: the default setting, chosen to transfer across datasets (not the best "
            "on one).",
            f"# The method keys of conf/{method}-{source}-strict.toml (tuned on "
            f"{label[source]}): by leave-one-dataset-out",
            "# over ML-100K, Last.fm-2K and generated data, the setting whose worst test HR@10 "
            "ratio to the reference",
            f"# on the held-out datasets is highest ({worst['worst_ratio']:.3f}).",
            "# Table: bench/results/transfer.md (docs/own-data.md, 'Settings that transfer'):",
            f"# {command}",
            f"# Early stopping after {patience} evaluated rounds without a better validation "
            "HR@10, as "
            "measured."
            if patience
            else "# No early stopping, as measured (patience 10 or 20 ends some of these runs at "
            "an early peak: the report).",
            '# Add your data\'s keys (dataset = ..., or dataset = "file" and data-file = ...):',
            f"# fedrec run conf/{method}-default.toml dataset='lastfm-2k'",
        ]
        if patience:
            keys["early-stopping-patience"] = patience
        lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
        path = conf_dir() / f"{method}-default.toml"
        path.write_text("\n".join(lines) + "\n")
        written.append(path)
    return written


def command_line(
    argv: list[str],
    script: str = "transfer.py",
    hidden: tuple[str, ...] = ("--data-dir", "--cache"),
) -> str:
    """The command as a report shows it: the folders of ``hidden`` options by name (DIR for
    the data folder, CACHE for ``--cache``, ...), never this machine's paths."""
    shown = []
    skip = False
    for i, item in enumerate(argv):
        if skip:
            skip = False
            continue
        if item in hidden:
            shown += [item, "DIR" if item == "--data-dir" else item[2:].upper()]
            skip = i + 1 < len(argv)
            continue
        shown.append(item)
    return f"python bench/{script} " + shlex.join(shown)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "seed": args.seed,
        "rounds": args.rounds,
        "patience": args.patience,
        "protocol": "strict",
        "datasets": {t: DATASETS[t]["keys"] for t in args.targets},
    }
