"""The wall time of the two test tiers, as ``.ci/run`` runs them.

Runs ``python -m pytest`` (the fast tier: pyproject's addopts deselect the slow tests), then
``python -m pytest -m slow`` (the slow tier: end-to-end runs through Flower), in the project
folder with ``.ci/run``'s environment: ``FEDREC_DATA_DIR`` (default ``../shared/datasets``)
and a fresh temporary ``FEDREC_CACHE_DIR``, removed afterwards. Records each tier's wall
seconds, its passed / skipped / failed counts (and the failed tests), the load average before
and after it, the machine's cores, the date and the commit; writes ``<out>/test-tiers.md`` and
``.json``::

    python bench/test_tiers.py --out bench/results

The times are those of this machine at its load: the report states both.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fedrec_lab.project import project_root
from fedrec_lab.tiers import COMMAND, measure, sentence, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="the raw datasets (default $FEDREC_DATA_DIR, else ../shared/datasets)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    command = COMMAND + (" --data-dir DIR" if args.data_dir else "")
    if args.out != Path("bench/results"):
        command += f" --out {args.out}"
    data_dir = args.data_dir or Path(
        os.environ.get("FEDREC_DATA_DIR") or project_root().parent / "shared" / "datasets"
    )
    if not data_dir.is_dir():
        parser.error(f"no folder {data_dir}: give the raw datasets with --data-dir")
    result = measure(data_dir, command)
    out = args.out if args.out.is_absolute() else project_root() / args.out
    path = write(result, out)
    print(f"wrote {path}\n{sentence(result)}")
    return 0 if all(t["exit_code"] == 0 for t in result["tiers"]) else 1


if __name__ == "__main__":
    sys.exit(main())
