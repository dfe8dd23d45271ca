"""FedRAP's reference code on our ML-100K ``paper`` split, 3 seeds, every round logged.

The reference is mtics/FedRAP at the pinned commit :data:`PINNED`, in a folder the user cloned
(never copied into this project)::

    git clone https://github.com/mtics/FedRAP REPO
    git -C REPO checkout d6ee2ac97d0257be8f07ad123114ae6df0eb3d99
    python bench/reference/fedrap.py --repo REPO --data-dir DIR --seeds 0 1 2

For each seed the reference reads ``datasets/movielens/ratings.dat`` from a scratch folder,
written from our split of ``conf/fedrap-ml100k-paper.toml`` at that seed exactly as
``bench/reference/pfedrec.py`` writes it (per user the test row, the validation row, then the
train rows, with timestamps 2, 1, 0, so that the reference's leave-one-out yields our split;
items numbered in the order the reference numbers them). The evaluation negatives are ours (99
validation, 99 test). Everything else is the reference's ``train.py`` with its defaults: all
users every round, 10 local epochs (a user stops early when its running loss changes by under
``tol = 1e-4``), batch 2048, 4 negatives, d = 32, SGD with weight decay 1e-4 at 0.5 (score
head) and 200 (both item tables), the rate times 0.95 after every batch (restarted every
round) and times 0.97 after every round, loss ``BCE - 0.1 * MSE(D_u, C) + 0.1 * L1(C)`` over
the batch's rows (its ``tanh`` schedule is computed but never read by the loss), the whole
item table averaged over the round's users, 100 rounds; run on the CPU by
``bench/reference/fedrap_driver.py`` (its docstring lists what it adds; no file of the
reference is edited).

Output, ``--out`` (default ``bench/results/reference/fedrap-ml100k-paper.json``): per seed,
every round's validation and test HR@10 / NDCG@10, the round chosen on validation (our rule)
and the one chosen on test, rewritten after each seed; plus the command, the pinned commit and
the driver's additions. ``--collect`` writes it from the logs of runs still going or stopped.
The raw logs stay in ``--work``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fedrec_lab.project import project_root
from fedrec_lab.reference import runs as ref
from fedrec_lab.reference.ratings import reference_files

PINNED = "d6ee2ac97d0257be8f07ad123114ae6df0eb3d99"
URL = "https://github.com/mtics/FedRAP"
PRESET = project_root() / "conf" / "fedrap-ml100k-paper.toml"
DRIVER = Path(__file__).with_name("fedrap_driver.py")
ADDITIONS = [
    "CPU: torch.cuda.set_device does nothing; --use_cuda '' (its type=bool flag)",
    "Python >= 3.11: random.sample of a set in utils/data.py samples tuple(set), as Python "
    "<= 3.10 did",
    "NumPy >= 2.4: np.in1d (removed) is np.isin",
    "an empty coloredlogs module (initLogging's console colours)",
    "the evaluation negatives are ours: 99 for test (SampleGenerator._sample_negative; the "
    "training negatives' pool is the reference's) and 99 others for validation "
    "(SampleGenerator.validate_data; the reference uses the test negatives for both)",
    "each federatedEvaluate call prints its HR@10 / NDCG@10 with 6 decimals",
]
ZERO_PERSONAL = [
    "--personal-init zero: FedRAP.item_personality (every user's starting personal table) set "
    "to zero after it is drawn",
]
FAST_LOADER = [
    "--fast-loader: each user's train loader draws the same random numbers as its "
    "DataLoader(shuffle=True) and yields the same batches by indexing the tensors (no "
    "per-sample fetch and collate)",
]


def run_seed(args: argparse.Namespace, seed: int) -> dict:
    """One seed: our split in the reference's file, then the driver."""
    work = Path(args.work).resolve() / f"seed{seed}"
    split = ref.our_split(PRESET, args.data_dir, seed)
    arrays = reference_files(split, work / "datasets" / "movielens")
    half = split.valid_negatives.shape[1]
    np.save(work / "valid_negatives.npy", arrays["negatives"][:, :half])
    np.save(work / "test_negatives.npy", arrays["negatives"][:, half:])
    np.save(work / "valid_items.npy", arrays["valid_items"])
    settings = {
        "repo": str(Path(args.repo).resolve()),
        "seed": seed,
        "threads": args.threads,
        "valid_negatives": str(work / "valid_negatives.npy"),
        "test_negatives": str(work / "test_negatives.npy"),
        "valid_items": str(work / "valid_items.npy"),
        "arguments": reference_arguments(args.rounds, seed) + changed_arguments(args.change),
        "fast_loader": args.fast_loader,
        "personal_init": args.personal_init,
    }
    return ref.run_driver(DRIVER, settings, work, args.rounds)


def reference_arguments(rounds: int, seed: int) -> list[str]:
    """``train.py``'s command line: its defaults, our file, the CPU, the seed, the rounds."""
    return [
        "--dataset",
        "movielens",
        "--data_file",
        "ratings.dat",
        "--use_cuda",
        "",
        "--seed",
        str(seed),
        "--num_round",
        str(rounds),
    ]


def changed_arguments(changes: list[str]) -> list[str]:
    """``NAME=VALUE`` pairs as ``train.py`` options (``--NAME VALUE``): an ablation of the
    reference through its own command line, e.g. ``l2_regularization=0``."""
    out = []
    for change in changes:
        name, sep, value = change.partition("=")
        if not sep or not name:
            raise SystemExit(f"--change {change!r}: write NAME=VALUE, e.g. l2_regularization=0")
        out += [f"--{name}", value]
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ref.add_run_arguments(parser, out="fedrap-ml100k-paper.json", work="fedrap-reference")
    parser.add_argument(
        "--fast-loader",
        action="store_true",
        help="the driver's train loader that yields DataLoader's batches by indexing (same "
        "draws, same batches; the driver's docstring)",
    )
    parser.add_argument(
        "--personal-init",
        choices=("reference", "zero"),
        default="reference",
        help="zero: every user's personal item table starts at zero, as ours (an ablation)",
    )
    parser.add_argument(
        "--change",
        nargs="+",
        default=[],
        metavar="NAME=VALUE",
        help="train.py options to change from its defaults (an ablation of the reference)",
    )
    args = parser.parse_args(argv)
    ref.check_commit(Path(args.repo), PINNED, URL)
    record = {
        "method": "fedrap",
        "dataset": "ml-100k",
        "protocol": "paper",
        "reference": URL,
        "commit": PINNED,
        "rounds_planned": args.rounds,
        "command": ref.shown_command(
            " ".join(
                ["fedrap.py"]
                + (["--fast-loader"] if args.fast_loader else [])
                + (["--personal-init", "zero"] if args.personal_init == "zero" else [])
                + (["--change", *args.change] if args.change else [])
            ),
            args.seeds,
            args.rounds,
        ),
        "our_preset": "conf/fedrap-ml100k-paper.toml",
        "driver_additions": ADDITIONS
        + (FAST_LOADER if args.fast_loader else [])
        + (ZERO_PERSONAL if args.personal_init == "zero" else []),
        "reference_arguments": reference_arguments(args.rounds, 0)[:-4]
        + changed_arguments(args.change),
        "selection": "chosen_on_valid: the round with the best validation HR@10, the earliest "
        "among ties (our rule); chosen_on_test: the best test HR@10, the earliest among ties "
        "(the reference's train.py takes the latest best test round and reports the "
        "validation metrics of that round)",
    }
    ref.collect_or_run(args, record, run_seed)


if __name__ == "__main__":
    main()
