"""Seconds and peak memory of making the data: generated data at scale, and a user's file read
through ``dataset = "file"`` (its separator and header sniffed), each in a fresh process.

Cases (medians over ``--repeats`` runs, one after the other; compare ratios, not absolute
numbers, across machines):

- ``synthetic-100k``: ``generate_synthetic`` with 100,000 users x 50,000 items, 50 per user;
- ``file-<shape>-<rows>``: a generated file of that many rows (100,000 users), read and
  filtered as ``dataset = "file"`` reads it: ``csv`` (comma, header, timestamps) and
  ``whitespace`` (no header, no timestamps).

    python bench/data_speed.py --out bench/results
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
#: What one case runs, in a fresh Python (its peak RSS is that of the case alone).
CASE = """
import json, resource, sys, time
from pathlib import Path
kind, arg = sys.argv[1], sys.argv[2]
started = time.perf_counter()
if kind == "synthetic":
    from fedrec_flwr.data.synthetic import generate_synthetic
    data = generate_synthetic(num_users=100_000, num_items=50_000, mean_degree=50)
else:
    from fedrec_flwr.data.user_file import UserFile
    from fedrec_flwr.data.user_filters import load_user_file
    started = time.perf_counter()
    data = load_user_file(UserFile(Path(arg)))
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "rows": len(data), "peak_mb": peak}))
"""


def write_file(path: Path, rows: int, shape: str) -> None:
    """``rows`` interactions of 100,000 users over 20,000 items: ``csv`` with a header and
    timestamps, ``whitespace`` without either."""
    import numpy as np

    rng = np.random.default_rng(0)
    users = rng.integers(0, 100_000, rows)
    items = rng.integers(0, 20_000, rows)
    with open(path, "w") as out:
        if shape == "csv":
            out.write("user_id,item_id,rating,timestamp\n")
            for k in range(rows):
                out.write(f"{users[k]},{items[k]},{1 + k % 5},{880_000_000 + k}\n")
        else:
            for k in range(rows):
                out.write(f"{users[k]}  {items[k]}\t{1 + k % 5}\n")


def run_case(kind: str, arg: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CASE, kind, arg],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of each file case")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(PROJECT / "bench" / "results"))
    args = parser.parse_args()
    lines = [
        "# Making the data: seconds and peak memory",
        "",
        "```bash",
        f"python bench/data_speed.py --rows {args.rows} --repeats {args.repeats}",
        "```",
        "",
    ]
    load_before = os.getloadavg()[0]
    rows = ["| case | rows | median s | min s | peak RSS MB |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="fedrec-data-speed-") as folder:
        cases = [("synthetic-100k", "synthetic", "")]
        for shape, suffix in (("csv", ".csv"), ("whitespace", ".txt")):
            path = Path(folder) / f"ratings-{shape}{suffix}"
            write_file(path, args.rows, shape)
            cases.append((f"file-{shape}-{args.rows}", "file", str(path)))
        for name, kind, arg in cases:
            runs = [run_case(kind, arg) for _ in range(args.repeats)]
            seconds = [r["seconds"] for r in runs]
            rows.append(
                f"| {name} | {runs[0]['rows']:,} | {statistics.median(seconds):.2f} "
                f"| {min(seconds):.2f} | {max(r['peak_mb'] for r in runs):.0f} |"
            )
            print(rows[-1], flush=True)
    lines += rows
    lines += [
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; 1-minute load average {load_before:.1f} before and "
        f"{os.getloadavg()[0]:.1f} after (the machine is shared). Each run in a fresh "
        "process; peak RSS is that process's (`ru_maxrss`), imports included. The file cases "
        "read, sniff, parse and filter the file (`fedrec_flwr.data.user_filters`), not the "
        "split.",
        "",
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "data-speed.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
