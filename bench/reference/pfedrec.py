"""PFedRec's reference code on our ML-100K ``paper`` split, 3 seeds, every round logged.

The reference is Zhangcx19/IJCAI-23-PFedRec at the pinned commit :data:`PINNED`, in a folder
the user cloned (never copied into this project; its ``data/*/ratings.dat`` files are not
needed)::

    git clone https://github.com/Zhangcx19/IJCAI-23-PFedRec REPO
    git -C REPO checkout abc23809b9bca8f4f09fab5311ae4a63ed6159d2
    python bench/reference/pfedrec.py --repo REPO --data-dir DIR --seeds 0 1 2

For each seed the reference reads ``data/ml-100k/ratings.dat`` from a scratch folder, written
from our split of ``conf/pfedrec-ml100k-paper.toml`` at that seed so that the reference's own
leave-one-out (newest row to test, second-newest to validation) yields our split exactly: per
user, the test row, the validation row, then the train rows, with timestamps 2, 1, 0. Items
are numbered in the order the reference numbers them (first appearance in the file); the
evaluation negatives are ours (99 validation, 99 test), given in that numbering. Everything
else is the reference's ``train.py`` with its defaults (all users every round, lr 0.1, item lr
0.1 x 80 x num_items, batch 256, 4 negatives, d = 32, 100 rounds), run on the CPU by
``bench/reference/pfedrec_driver.py`` (its docstring lists what it adds; no file of the
reference is edited).

Output, ``--out`` (default ``bench/results/reference/pfedrec-ml100k-paper.json``): per seed,
every round's validation and test HR@10 / NDCG@10, the round chosen on validation and the one
chosen on test (the reference's own rule is the best validation HR@10, the latest among
ties), rewritten after each seed; plus the command, the pinned commit and the driver's
additions. The raw logs stay in ``--work``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fedrec_lab.project import project_root
from fedrec_lab.reference import runs as ref
from fedrec_lab.reference.ratings import reference_files

PINNED = "abc23809b9bca8f4f09fab5311ae4a63ed6159d2"
URL = "https://github.com/Zhangcx19/IJCAI-23-PFedRec"
PRESET = project_root() / "conf" / "pfedrec-ml100k-paper.toml"
DRIVER = Path(__file__).with_name("pfedrec_driver.py")
DATASET = "ml-100k"
ADDITIONS = [
    "seed: Python random, NumPy and PyTorch seeded with the seed after data.py's import "
    "(which seeds random with 0)",
    "CPU: torch.Tensor.cuda returns the tensor itself; --use_cuda '' (its type=bool flag)",
    "Python >= 3.11: random.sample of a set in data.py samples tuple(set), as Python <= 3.10 did",
    "an empty tensorboardX module (engine.py imports SummaryWriter and never uses it)",
    "the 198 evaluation negatives are ours (SampleGenerator._sample_negative replaced); the "
    "training negatives' pool is the reference's",
    "each fed_evaluate call prints its HR@10 / NDCG@10 with 6 decimals",
]


def run_seed(args: argparse.Namespace, seed: int) -> dict:
    """One seed: our split in the reference's file, then the driver."""
    work = Path(args.work).resolve() / f"seed{seed}"
    for folder in ("log", "sh_result"):
        (work / folder).mkdir(parents=True, exist_ok=True)
    split = ref.our_split(PRESET, args.data_dir, seed)
    arrays = reference_files(split, work / "data" / DATASET)
    for name, array in arrays.items():
        np.save(work / f"{name}.npy", array)
    settings = {
        "repo": str(Path(args.repo).resolve()),
        "seed": seed,
        "threads": args.threads,
        "negatives": str(work / "negatives.npy"),
        "valid_items": str(work / "valid_items.npy"),
        "arguments": reference_arguments(args.rounds),
    }
    return ref.run_driver(DRIVER, settings, work, args.rounds)


def reference_arguments(rounds: int) -> list[str]:
    """``train.py``'s command line: its defaults, the dataset, the CPU, the rounds."""
    return ["--dataset", DATASET, "--use_cuda", "", "--num_round", str(rounds)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ref.add_run_arguments(parser, out="pfedrec-ml100k-paper.json", work="pfedrec-reference")
    args = parser.parse_args(argv)
    ref.check_commit(Path(args.repo), PINNED, URL)
    record = {
        "method": "pfedrec",
        "dataset": DATASET,
        "protocol": "paper",
        "reference": URL,
        "commit": PINNED,
        "rounds_planned": args.rounds,
        "command": ref.shown_command("pfedrec.py", args.seeds, args.rounds),
        "our_preset": "conf/pfedrec-ml100k-paper.toml",
        "driver_additions": ADDITIONS,
        "reference_arguments": reference_arguments(args.rounds),
        "selection": "chosen_on_valid: the round with the best validation HR@10, the earliest "
        "among ties (our rule; the reference's train.py takes the latest); chosen_on_test: "
        "the best test HR@10, the earliest among ties",
    }
    ref.collect_or_run(args, record, run_seed)


if __name__ == "__main__":
    main()
