"""FedRecGEL's reference code on our ``paper`` split (Last.fm-2K; ML-100K), every round logged.

The reference is anonymifish/FedRecGEL (GPL-3.0) at the pinned commit :data:`PINNED`, in a
folder the user cloned (never copied into this project)::

    git clone https://github.com/anonymifish/FedRecGEL REPO
    git -C REPO checkout c7f2d929b49bb4112d8623d284c4c521663b0785
    python bench/reference/fedrecgel.py --repo REPO --data-dir DIR --seeds 0 1 2
    python bench/reference/fedrecgel.py --repo REPO --data-dir DIR --dataset ml-100k

For each seed, the split, the held-out items and the 99 validation and 99 test negatives are
those of our run of ``conf/fedrecgel-<dataset>-reference.toml`` at that seed
(:func:`fedrec_lab.reference.runs.our_split`), written in the reference's file layout
(``<work>/data/<lastfm2k|ml100k>/preprocess/``). Its train file holds our train rows only: the
validation item, which the reference's own split trains on, is held out, and its negatives
are drawn from every item not among the train positives, as its code does. The reference's
configuration is its Last.fm-2K one, for both datasets (it has none for ML-100K): radii
``rho_ns = rho_sh = 0.01``, local learning rate 0.1, 10 % of users a round, 4 negatives per
positive, 99 test negatives, 100 rounds (the server's Adam step 0.001 is fixed in its
``utils/prepare_models.py``).

No file of the reference is edited: ``bench/reference/fedrecgel_driver.py`` calls its
``methods.fedrecgel.fedrecgel`` with this configuration on the CPU and adds the seed, an empty
stand-in for the ``models.fedrap`` module its ``utils/evaluate.py`` imports but the repository
lacks, no checkpoint files, and an evaluation of the same model on the validation file after
each test evaluation (the driver's docstring lists these). Both are logged every round.

Output, ``--out`` (default ``bench/results/reference/fedrecgel-<short>-paper.json``, short
``lastfm2k`` or ``ml100k``): per seed, every round's validation and test HR@10 / NDCG@10, the
round chosen on validation (our rule) and the one chosen on test (the reference code's own
rule), rewritten after each seed; plus the command, the pinned commit and the driver's
additions. ``--collect`` writes it from the logs of runs still going or stopped (every seed
cut to the rounds all completed). The raw logs stay in ``--work``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from fedrec_lab.project import project_root
from fedrec_lab.reference import runs as ref

PINNED = "c7f2d929b49bb4112d8623d284c4c521663b0785"
URL = "https://github.com/anonymifish/FedRecGEL"
DRIVER = Path(__file__).with_name("fedrecgel_driver.py")
SHORT = {"lastfm-2k": "lastfm2k", "ml-100k": "ml100k"}  # our presets' and files' names
ADDITIONS = [
    "seed: Python random, NumPy and PyTorch seeded with the seed (the reference seeds nothing)",
    "device 'cpu' in the configuration (no code edit)",
    "an empty models.fedrap module with a RAPBase class, which utils/evaluate.py imports and "
    "the repository lacks",
    "torch.save does nothing (no model checkpoint at each best round)",
    "after each test evaluation, the same model is evaluated on the validation file by the "
    "reference's top100_metrics",
]


def reference_config(rounds: int, seed: int, data_root: Path, dataset: str) -> dict:
    """The reference's ``exp_config.json`` keys with its Last.fm-2K values (radii 0.01 /
    0.01, which ``conf/fedrecgel-ml100k-reference.toml`` takes for ML-100K too)."""
    return {
        "task_name": "default",
        "attribute": f"seed{seed}",
        "method": "fedrecgel",
        "model": "fedrecgel",
        "batch_size": 256,
        "dataset_path": str(data_root) + "/",
        "dataset": SHORT[dataset],
        "num_ng": 4,
        "test_num_ng": 99,
        "device": "cpu",
        "global_epochs": rounds,
        "local_epochs": 1,
        "local_lr": 0.1,
        "global_lr": 0.001,
        "fraction": 0.1,
        "attr": {
            "method": "fedrecgel",
            "rho_sh": 0.01,
            "rho_ns": 0.01,
            "ablate_sh_sam": False,
            "ablate_ns_sam": False,
        },
    }


def preset(dataset: str) -> Path:
    return project_root() / "conf" / f"fedrecgel-{SHORT[dataset]}-reference.toml"


def run_seed(args: argparse.Namespace, seed: int) -> dict:
    """One seed: our split in the reference's files, then the driver."""
    work = Path(args.work).resolve() / f"seed{seed}"
    data_root = work / "data"
    split = ref.our_split(preset(args.dataset), args.data_dir, seed)
    if split.train_item.max() + 1 != split.num_items:
        raise ref.ReferenceError(
            f"{args.dataset}: the last item is in no train row; the reference sizes its item "
            "table by the largest train item and would not know it"
        )
    files = ref.write_ncf_files(split, data_root / SHORT[args.dataset] / "preprocess")
    settings = {
        "repo": str(Path(args.repo).resolve()),
        "seed": seed,
        "threads": args.threads,
        "valid_file": str(files["valid"]),
        "config": reference_config(args.rounds, seed, data_root, args.dataset),
        "dense_init": args.dense_init,
    }
    return ref.run_driver(DRIVER, settings, work, args.rounds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", choices=sorted(SHORT), default="lastfm-2k")
    parser.add_argument(
        "--dense-init",
        choices=["reference", "pytorch"],
        default="reference",
        help="ablation: 'pytorch' re-initialises the reference's dense layers with PyTorch's "
        "default, the init of our NeuMF (JSON name +pytorch-init)",
    )
    ref.add_run_arguments(parser)
    parser.add_argument(
        "--out", help="default: bench/results/reference/fedrecgel-<dataset>-paper.json"
    )
    parser.add_argument(
        "--work",
        help="scratch folder: the reference's files and raw logs (default: in the system's "
        "temporary folder)",
    )
    args = parser.parse_args(argv)
    ref.check_commit(Path(args.repo), PINNED, URL)
    short = SHORT[args.dataset]
    tag = "" if args.dense_init == "reference" else "+pytorch-init"
    default_out = project_root() / "bench/results/reference" / f"fedrecgel-{short}-paper{tag}.json"
    args.out = args.out or str(default_out)
    args.work = args.work or str(Path(tempfile.gettempdir()) / f"fedrecgel-reference-{short}{tag}")
    record = {
        "method": "fedrecgel",
        "dataset": args.dataset,
        "protocol": "paper",
        "reference": URL,
        "commit": PINNED,
        "rounds_planned": args.rounds,
        "command": ref.shown_command(
            f"fedrecgel.py --dataset {args.dataset}"
            + (f" --dense-init {args.dense_init}" if tag else ""),
            args.seeds,
            args.rounds,
        ),
        "ablation": "dense layers re-initialised with PyTorch's default" if tag else None,
        "our_preset": f"conf/fedrecgel-{short}-reference.toml",
        "driver_additions": ADDITIONS,
        "reference_config": reference_config(args.rounds, 0, Path("DATA"), args.dataset),
        "selection": "chosen_on_valid: the round with the best validation HR@10 (our rule); "
        "chosen_on_test: the best test HR@10 (the reference's own rule); earliest among ties",
    }
    ref.collect_or_run(args, record, run_seed)


if __name__ == "__main__":
    main()
