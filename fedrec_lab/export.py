"""``fedrec export``: write one folder per device holding only its users' data
(docs/deployment.md).

    fedrec export --dataset ml-100k --protocol strict --seed 0 \\
        --num-partitions 3 --out devices [--data-dir /data/recsys]

writes ``devices/device-<p>/`` for ``p`` in ``0..N-1``: the rows of the users ``u`` with
``u mod N == p`` after the leave-one-out split (``train_indptr.npy``, ``train_items.npy``,
``valid_item.npy``, ``test_item.npy``; ``eval_negatives.npy`` under the paper protocol, drawn
with ``--seed``), ``users.npy`` (their global ids) and ``manifest.json`` (dataset, protocol,
seed, split fingerprint, partition, users, catalogue size); and ``devices/export.json``, what
the devices share. A SuperNode reads its folder with ``--node-config "data-path='...'"``
(:mod:`fedrec_flwr.data.device`, the format's one reader).
Each folder is written next to its final place, then renamed over it (an earlier export of
the same folder is replaced whole).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data import user_dataset
from fedrec_flwr.data.device import FORMAT, MANIFEST, split_fingerprint
from fedrec_flwr.data.prepared import PreparedData, data_dir_read, prepare
from fedrec_flwr.partition import users_of_partition
from fedrec_flwr.schema import Scalar


def device_arrays(prepared: PreparedData, users: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """The arrays of one device: only ``users``' rows."""
    counts = np.diff(np.asarray(prepared.train_indptr))[users]
    arrays = {
        "users": users.astype(np.int64),
        "train_indptr": np.r_[0, np.cumsum(counts)].astype(np.int64),
        "train_items": np.concatenate(
            [prepared.train_positives(int(u)) for u in users] or [np.empty(0, np.int64)]
        ).astype(np.int64),
        "valid_item": np.asarray(prepared.valid_item[users], np.int64),
        "test_item": np.asarray(prepared.test_item[users], np.int64),
    }
    if prepared.protocol == "paper":
        arrays["eval_negatives"] = np.asarray(prepared.eval_negatives(seed)[users])
    return arrays


def export_devices(config: RunConfig, num_partitions: int, out: str | Path) -> list[Path]:
    """Export the configured dataset's split for ``num_partitions`` devices; their folders."""
    if num_partitions < 1:
        raise ValueError(f"num-partitions must be >= 1, got {num_partitions}")
    prepared = prepare(config)
    if num_partitions > prepared.num_users:
        raise ValueError(
            f"{num_partitions} partitions for {prepared.num_users} users: some would be empty"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    common = {
        "format": FORMAT,
        "dataset": config.data.dataset,
        "protocol": config.training.protocol,
        "seed": config.training.seed,
        "fingerprint": split_fingerprint(prepared),
        "num-users": prepared.num_users,
        "num-items": prepared.num_items,
        "num-partitions": num_partitions,
    }
    folders = []
    for partition in range(num_partitions):
        users = users_of_partition(partition, num_partitions, prepared.num_users)
        manifest = {**common, "partition-id": partition, "users": users.tolist()}
        folder = out / f"device-{partition}"
        _write_folder(folder, device_arrays(prepared, users, config.training.seed), manifest)
        folders.append(folder)
    source: dict[str, Scalar] = {"data-dir": data_dir_read(config)}
    if config.data.dataset == user_dataset.FILE_DATASET:
        file = config.data.file
        source = {**user_dataset.settings(file), **user_dataset.source_record(config)}
    if config.data.dataset == "synthetic":
        source = {
            k: config.value(k)
            for k in ("synthetic-users", "synthetic-items", "synthetic-mean-degree")
        }
    summary = {**common, "source": source, "devices": [f.name for f in folders]}
    (out / "export.json").write_text(json.dumps(summary, indent=2) + "\n")
    return folders


def _write_folder(folder: Path, arrays: dict[str, np.ndarray], manifest: dict) -> None:
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        for name, array in arrays.items():
            np.save(tmp / f"{name}.npy", array)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedrec export",
        description="Write one folder per device holding only its users' data.",
    )
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--protocol", default="strict", choices=("strict", "paper"))
    parser.add_argument("--seed", type=int, default=0, help="seed of the paper negatives")
    parser.add_argument("--num-partitions", type=int, required=True)
    parser.add_argument("--out", required=True, help="folder receiving device-<p>/")
    parser.add_argument("--data-dir", default="", help="as the run-config key data-dir")
    for key, default in (("users", 1000), ("items", 2000), ("mean-degree", 50)):
        parser.add_argument(f"--synthetic-{key}", type=int, default=default)
    for key, (_, default) in user_dataset.KEYS.items():  # dataset 'file' (docs/own-data.md)
        parser.add_argument(f"--{key}", type=type(default), help=f"default {default!r}")
    return parser


def check_arguments(argv: list[str] | None) -> tuple[argparse.Namespace, RunConfig]:
    """The arguments of ``main`` and the run configuration they make, checked (SystemExit
    or ConfigError if not); no data is read."""
    args = _parser().parse_args(argv)
    config = RunConfig.from_mapping(
        {
            "dataset": args.dataset,
            "protocol": args.protocol,
            "seed": args.seed,
            "data-dir": args.data_dir,
            "synthetic-users": args.synthetic_users,
            "synthetic-items": args.synthetic_items,
            "synthetic-mean-degree": args.synthetic_mean_degree,
            **{
                key: getattr(args, key.replace("-", "_"))
                for key in user_dataset.KEYS
                if getattr(args, key.replace("-", "_")) is not None
            },
        }
    )
    return args, config


def main(argv: list[str] | None = None) -> int:
    args, config = check_arguments(argv)
    folders = export_devices(config, args.num_partitions, args.out)
    summary = json.loads((Path(args.out) / "export.json").read_text())
    print(
        f"{summary['dataset']} ({summary['protocol']}, fingerprint {summary['fingerprint'][:12]}): "
        f"{summary['num-users']} users x {summary['num-items']} items -> "
        f"{len(folders)} device folders in {Path(args.out).resolve()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
