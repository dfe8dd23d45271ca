"""Every preset family through ``flwr run`` (private SuperLink, 2 SuperNodes), both protocols.

A few rounds each, on one dataset; writes ``bench/results/flwr-all.md`` with each run's
status and validation HR@10, to show every method and plug-in runs through Flower's
simulation engine (the metrics themselves come from ``bench/reproduce.py``)::

    python bench/flwr_all.py --data-dir ../shared/datasets --rounds 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from fedrec_lab.launch import PROJECT, merged_run_config, run

SHORT = {"ml-100k": "ml100k", "lastfm-2k": "lastfm2k"}


def families(short: str) -> list[str]:
    """Preset prefixes that exist for this dataset (``pfedrec``, ``fedmf-dual``, ...)."""
    stems = sorted(p.stem for p in (PROJECT / "conf").glob(f"*-{short}-paper.toml"))
    return [stem[: -len(f"-{short}-paper")] for stem in stems]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--out", default=str(PROJECT / "bench" / "results" / "flwr-all.md"))
    args = parser.parse_args()
    short = SHORT[args.dataset]
    lines = [
        "| preset | status | rounds | val HR@10 (last round) | seconds |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for family in families(short):
            for protocol in ("paper", "strict"):
                stem = f"{family}-{short}-{protocol}"
                config = merged_run_config(
                    PROJECT / "conf" / f"{stem}.toml",
                    [
                        f"num-server-rounds={args.rounds}",
                        f"data-dir={json.dumps(str(Path(args.data_dir).resolve()))}",
                        f"results-dir={json.dumps(tmp)}",
                        f"run-name={json.dumps(stem)}",
                    ],
                )
                started = time.time()
                status, _ = run(config, nodes=args.nodes, stream=False, timeout=1800)
                rounds_file = Path(tmp) / stem / "rounds.csv"
                rows = rounds_file.read_text().splitlines() if rounds_file.exists() else []
                header = rows[0].split(",") if rows else []
                last = rows[-1].split(",") if len(rows) > 1 else []
                hr = last[header.index("val-hr@10")] if last else ""
                lines.append(
                    f"| {stem} | {status} | {len(rows) - 1 if rows else 0} | "
                    f"{100 * float(hr):.2f} | {time.time() - started:.0f} |"
                    if hr
                    else f"| {stem} | {status} | 0 | - | {time.time() - started:.0f} |"
                )
                print(lines[-1], flush=True)
    text = (
        "\n".join(lines)
        + f"\n\n`flwr run` with {args.nodes} SuperNodes, {args.rounds} rounds of each preset "
        f"on {args.dataset}. Command:\n\n```\npython bench/flwr_all.py --data-dir DATA "
        f"--dataset {args.dataset} --rounds {args.rounds}\n```\n"
    )
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
