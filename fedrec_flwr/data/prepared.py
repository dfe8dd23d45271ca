"""Split once, cache on disk, load any user's data in milliseconds.

:func:`prepare` turns a dataset into leave-one-out arrays (:mod:`fedrec_flwr.data.split`,
``docs/protocols.md``) and stores them as ``.npy`` files under the cache;
:class:`PreparedData` memory-maps them so a client reads only its own users' rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fedrec_flwr import atomic
from fedrec_flwr.data import user_dataset
from fedrec_flwr.data.card import card_lines, card_of, log_card
from fedrec_flwr.data.download import dataset_folder, default_cache_dir, required_files
from fedrec_flwr.data.interactions import DataError, Interactions
from fedrec_flwr.data.registry import DATASETS, TrainPairs
from fedrec_flwr.data.settings import DataSettings
from fedrec_flwr.data.split import LeaveOneOut, leave_one_out
from fedrec_flwr.data.synthetic import generate_synthetic
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.sampling import sample_excluding
from fedrec_flwr.seeding import keyed_rng

FORMAT_VERSION = 1
EVAL_NEGATIVES_PER_SPLIT = 99  # paper protocol: 99 for validation and 99 for test
_OPENED: dict[Path, PreparedData] = {}


class PerUser(Protocol):
    """A per-user array, indexed by global user id (one id or an array of ids)."""

    def __getitem__(self, users: Any) -> Any: ...

    def __len__(self) -> int: ...


class PreparedData:
    """Memory-mapped leave-one-out arrays of one (dataset, protocol), plus per-user views."""

    ARRAYS = ("train_indptr", "train_items", "valid_item", "test_item", "source_user")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta = json.loads((path / "meta.json").read_text())
        self.dataset: str = self.meta["dataset"]
        self.protocol: str = self.meta["protocol"]
        self.num_users: int = self.meta["num_users"]
        self.num_items: int = self.meta["num_items"]
        for name in self.ARRAYS:
            setattr(self, name, np.load(path / f"{name}.npy", mmap_mode="r"))
        self._eval_negatives: dict[int, PerUser] = {}
        self._exclusions: tuple[np.ndarray, np.ndarray] | None = None

    train_indptr: np.ndarray
    train_items: np.ndarray
    valid_item: PerUser
    test_item: PerUser
    source_user: np.ndarray

    def local(self, users: np.ndarray | int) -> np.ndarray | int:
        """Positions of global user ids in the split's per-user arrays: the ids themselves
        (a device's folder holds only its users: :meth:`DeviceData.local`)."""
        return np.asarray(users, dtype=np.int64)

    def train_positives(self, user: int) -> np.ndarray:
        """The user's train rows (items; repeats kept under the paper protocol unless
        ``train-pairs = "distinct"``)."""
        return np.asarray(self.train_items[self.train_indptr[user] : self.train_indptr[user + 1]])

    def interacted(self, user: int) -> np.ndarray:
        """Sorted distinct items of all the user's rows (train, validation, test)."""
        items = np.r_[self.train_positives(user), self.valid_item[user], self.test_item[user]]
        return np.unique(items)

    def negative_exclusion(self, user: int) -> np.ndarray:
        """Items that training negatives must avoid (sorted).

        ``paper``: every item the user interacted with, held-out ones included (the leak of
        the papers' code). ``strict``: the user's train positives only.
        """
        if self.protocol == "paper":
            return self.interacted(user)
        return np.unique(self.train_positives(user))

    def exclusions_of(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(counts, items): the :meth:`negative_exclusion` of each of ``users``, concatenated
        in their order (from a CSR over all users built once, without a dense user x item
        array)."""
        if self._exclusions is None:
            n, every = self.num_items, np.arange(self.num_users, dtype=np.int64)
            keys = np.repeat(every, np.diff(self.train_indptr)) * n + self.train_items
            if self.protocol == "paper":
                valid, test = np.asarray(self.valid_item), np.asarray(self.test_item)
                keys = np.r_[keys, every * n + valid, every * n + test]
            keys = np.unique(keys)
            owner = keys // n
            counts = np.bincount(owner, minlength=self.num_users)
            self._exclusions = (np.r_[0, np.cumsum(counts)].astype(np.int64), keys - owner * n)
        indptr, items = self._exclusions
        users = np.asarray(users, dtype=np.int64)
        counts = indptr[users + 1] - indptr[users]
        starts = np.repeat(indptr[users] - np.r_[0, np.cumsum(counts)[:-1]], counts)
        return counts, items[starts + np.arange(int(counts.sum()))]

    def eval_negatives(self, seed: int) -> PerUser:
        """[num_users, 198] negatives never interacted with, 99 for validation then 99 for
        test: the paper protocol's candidates, and under ``strict`` the ``s100-*`` metrics'."""
        if seed not in self._eval_negatives:
            file = self.path / f"eval_negatives_seed{seed}.npy"
            if not file.exists():
                atomic.save_npy(file, self._draw_eval_negatives(seed))
            self._eval_negatives[seed] = np.load(file, mmap_mode="r")
        return self._eval_negatives[seed]

    def _draw_eval_negatives(self, seed: int, users: np.ndarray | None = None) -> np.ndarray:
        """The negatives of ``users`` (all if None), one row each: each user's draw is keyed
        by (seed, user) and avoids its own items only, so any subset draws the same rows.
        A user with fewer than 198 items outside its own (tiny synthetic catalogs only) draws
        them with replacement, so that ``strict`` evaluation, which reports ``s100-*`` beside
        its full ranking, never fails on a small catalog."""
        users = np.arange(self.num_users) if users is None else users
        size = 2 * EVAL_NEGATIVES_PER_SPLIT
        out = np.empty((len(users), size), dtype=np.int32)
        for j, user in enumerate(users.tolist()):
            rng = keyed_rng(seed, "eval-negatives", user)
            excluded = self.interacted(user)
            distinct = self.num_items - len(excluded) >= size
            out[j] = sample_excluding(rng, self.num_items, excluded, size, distinct=distinct)
        return out

    @cached_property
    def num_train_rows(self) -> int:
        return int(self.train_indptr[-1])


def dataset_fingerprint(run: RunGroups | DataSettings) -> dict:
    """What identifies the prepared arrays: the dataset's source files or generator settings."""
    config = DataSettings.of(run)
    source: dict[str, Any]
    if config.dataset == "synthetic":
        source = {
            "users": config.synthetic.synthetic_users,
            "items": config.synthetic.synthetic_items,
            "mean-degree": config.synthetic.synthetic_mean_degree,
        }
    elif config.dataset == user_dataset.FILE_DATASET:
        source = user_dataset.fingerprint(config.file)
    else:
        folder = dataset_folder(config.dataset, config.resolved_data_dir() or None)
        source = {}
        for name in required_files(config.dataset, folder):
            stat = (folder / name).stat()
            source[str((folder / name).resolve())] = [stat.st_size, stat.st_mtime_ns]
    fingerprint = {
        "format": FORMAT_VERSION,
        "dataset": config.dataset,
        "protocol": config.protocol,
        "source": source,
    }
    if distinct_train(config):  # only where it changes the arrays: other caches keep their key
        fingerprint["train-pairs"] = config.data.train_pairs
    return fingerprint


def distinct_train(run: RunGroups | DataSettings) -> bool:
    """Does ``train-pairs = "distinct"`` change this split? Only under ``paper`` (``strict``
    removes repeated pairs before the split)."""
    config = DataSettings.of(run)
    return config.data.train_pairs == TrainPairs.DISTINCT and config.protocol == "paper"


def prepared_path(run: RunGroups | DataSettings) -> Path:
    """Cache folder of this config's prepared arrays."""
    config = DataSettings.of(run)
    fingerprint = dataset_fingerprint(config)
    digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]
    return default_cache_dir() / "prepared" / f"{config.dataset}-{config.protocol}-{digest}"


def data_dir_read(run: RunGroups | DataSettings) -> str:
    """The ``data-dir`` the dataset is read from, absolute: ``data-dir``, else
    ``$FEDREC_DATA_DIR``, else the download cache's ``datasets`` folder ('' if generated)."""
    config = DataSettings.of(run)
    if config.dataset in ("synthetic", user_dataset.FILE_DATASET):
        return ""
    folder = config.resolved_data_dir() or str(default_cache_dir() / "datasets")
    return os.path.abspath(os.path.expanduser(folder))


def load_interactions(run: RunGroups | DataSettings) -> Interactions:
    """Read (or generate) the configured dataset."""
    config = DataSettings.of(run)
    if config.dataset == "synthetic":
        return generate_synthetic(
            num_users=config.synthetic.synthetic_users,
            num_items=config.synthetic.synthetic_items,
            mean_degree=config.synthetic.synthetic_mean_degree,
            seed=0,
        )
    if config.dataset == user_dataset.FILE_DATASET:
        return user_dataset.load(config.file)
    folder = dataset_folder(config.dataset, config.resolved_data_dir() or None)
    return DATASETS[config.dataset].load(folder)


def prepare(run: RunGroups | DataSettings) -> PreparedData:
    """Split and cache the configured dataset if needed; return its prepared arrays."""
    config = DataSettings.of(run)
    path = prepared_path(config)
    if path in _OPENED:
        return _OPENED[path]
    if not (path / "meta.json").exists():
        started = time.perf_counter()
        data = load_interactions(config)
        distinct = distinct_train(config)
        split = leave_one_out(data, dedupe=config.protocol == "strict", distinct_train=distinct)
        if split.num_users == 0:
            raise DataError(
                f"{config.dataset}: no user has the 3 rows a leave-one-out split needs."
            )
        meta: dict[str, Any] = {
            "dataset": config.dataset,
            "protocol": config.protocol,
            "num_users": split.num_users,
            "num_items": split.num_items,
            "num_rows": len(data.user),
            "num_train_rows": int(split.train_indptr[-1]),
            "dropped_users": data.num_users - split.num_users,
            "deduplicated": config.protocol == "strict",
            "fingerprint": dataset_fingerprint(config),
            "seconds": round(time.perf_counter() - started, 3),
            "card": card_of(data, split, config.protocol),
        }
        if distinct:
            meta["train_pairs"] = config.data.train_pairs
            for step in meta["card"]["removed"]:
                if step["name"].startswith("repeated pairs"):
                    step["name"] = "repeated train pairs (train-pairs = distinct)"
        _write_prepared(path, split, meta)
    prepared = PreparedData(path)
    _OPENED[path] = prepared
    log_card(prepared.meta)
    return prepared


def check_prepared(run: RunGroups | DataSettings) -> list[str]:
    """Prepare the split of the configured dataset before a run starts (DataError if the
    data cannot be had: not found, not downloadable, a bad file); its card lines.

    Beyond what the readers check, the split must leave two users or more."""
    config = DataSettings.of(run)
    prepared = prepare(config)
    if prepared.num_users < 2:
        source = (
            config.file.data_file if config.dataset == user_dataset.FILE_DATASET else config.dataset
        )
        raise DataError(
            f"{source}: {prepared.num_users} user has the 3 rows a leave-one-out "
            f"split needs (train, validation, test; 3 distinct items under the strict "
            f"protocol): a federation needs at least 2. Give more users 3 rows or more, or "
            f"lower min-user-interactions and k-core."
        )
    card = prepared.meta.get("card")
    return card_lines(card) if card else []


def _write_prepared(path: Path, split: LeaveOneOut, meta: dict) -> None:
    """Write into a temporary folder, then rename it into place (atomic for readers)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        for name in PreparedData.ARRAYS:
            np.save(tmp / f"{name}.npy", getattr(split, name))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
        try:
            tmp.rename(path)
        except OSError:  # another process finished first: keep its copy
            if not (path / "meta.json").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
