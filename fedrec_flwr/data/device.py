"""A device's own data: the folder ``fedrec export`` (:mod:`fedrec_lab.export`) writes for it.

A device folder holds only its users' rows of the prepared split (train rows, validation and
test item; under the ``paper`` protocol their 99 + 99 evaluation negatives, which under
``strict`` the device draws itself for the ``s100-*`` metrics) and the public
size of the item catalogue, plus ``manifest.json``: dataset, protocol, seed, the split's
fingerprint, the partition and the users' global ids. :class:`DeviceData` reads it with the
interface of :class:`~fedrec_flwr.data.prepared.PreparedData` (users keep their global ids),
so a node computes exactly what it computes from the shared split.

:class:`DataIdentity` is what a node tells the server about its data in the handshake, from
either source; the server refuses a federation whose nodes disagree (:func:`conflict`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from fedrec_flwr.data.prepared import PerUser, PreparedData
from fedrec_flwr.partition import users_of_partition

FORMAT = "fedrec-device-data/1"
MANIFEST = "manifest.json"
ARRAYS = ("users", "train_indptr", "train_items", "valid_item", "test_item")
_FINGERPRINTS: dict[Path, str] = {}


def split_fingerprint(prepared: PreparedData) -> str:
    """sha256 of the whole split's content (every user's rows, the catalogue size, the
    dataset and protocol): the same on every machine that prepared the same data."""
    if prepared.path not in _FINGERPRINTS:
        digest = hashlib.sha256(
            json.dumps(
                [prepared.dataset, prepared.protocol, prepared.num_users, prepared.num_items]
            ).encode()
        )
        for name in ("train_indptr", "train_items", "valid_item", "test_item"):
            digest.update(np.ascontiguousarray(getattr(prepared, name), np.int64).tobytes())
        _FINGERPRINTS[prepared.path] = digest.hexdigest()
    return _FINGERPRINTS[prepared.path]


@dataclass(frozen=True)
class DataIdentity:
    """What a node's data is: the same for every node of a consistent federation."""

    dataset: str
    protocol: str
    seed: int  # the seed of the evaluation negatives (paper protocol)
    fingerprint: str
    num_users: int  # users of the whole federation (global ids 0..num_users-1)
    num_items: int  # the public item catalogue
    source: str  # "shared" (the prepared split) or "device <folder name>" (no path leaves it)

    def to_record(self) -> dict[str, str | int]:
        return {f"data-{k.replace('_', '-')}": v for k, v in asdict(self).items()}

    @classmethod
    def from_record(cls, record) -> DataIdentity:
        """Inverse of :meth:`to_record`; KeyError if a field is missing."""
        fields = cls.__dataclass_fields__
        return cls(**{k: record[f"data-{k.replace('_', '-')}"] for k in fields})


def conflict(a: DataIdentity, b: DataIdentity) -> str | None:
    """Why two nodes' data cannot train together (what differs); None if they can. The seed
    matters only under the paper protocol (it drew the evaluation negatives)."""
    for name in ("dataset", "protocol", "fingerprint", "num_items", "num_users"):
        if getattr(a, name) != getattr(b, name):
            return f"{name.replace('_', '-')} {getattr(a, name)} vs {getattr(b, name)}"
    if a.protocol == "paper" and a.seed != b.seed:
        return f"seed of the evaluation negatives {a.seed} vs {b.seed}"
    return None


def run_conflict(data: DataIdentity, dataset: str, protocol: str, seed: int) -> str | None:
    """Why a node's data does not fit the run's dataset, protocol and seed; None if it does."""
    if data.dataset != dataset or data.protocol != protocol:
        return (
            f"it holds {data.dataset} under the {data.protocol} protocol, the run asks for "
            f"{dataset} under {protocol}"
        )
    if protocol == "paper" and data.seed != seed:
        return (
            f"its evaluation negatives were drawn with seed {data.seed}, the run's seed is "
            f"{seed}: export with --seed {seed}"
        )
    return None


class _ByUser:
    """A per-user array of a device indexed by global user id (one id or an array of ids)."""

    def __init__(self, data: DeviceData, values: np.ndarray) -> None:
        self.data, self.values = data, values

    def __getitem__(self, users):
        return self.values[self.data.local(users)]

    def __len__(self) -> int:
        return len(self.values)


class DeviceData(PreparedData):
    """One device folder, read with :class:`PreparedData`'s interface (global user ids)."""

    def __init__(self, path: str | Path) -> None:  # not PreparedData's: no shared split
        self.path = Path(path)
        manifest_file = self.path / MANIFEST
        if not manifest_file.exists():
            raise FileNotFoundError(
                f"{manifest_file} not found: data-path must name a device folder written by "
                "`fedrec export` (e.g. .../device-0)."
            )
        self.meta = json.loads(manifest_file.read_text())
        if self.meta.get("format") != FORMAT:
            raise ValueError(f"{manifest_file}: format {self.meta.get('format')!r}, not {FORMAT}")
        self.dataset = self.meta["dataset"]
        self.protocol = self.meta["protocol"]
        self.seed = int(self.meta["seed"])
        self.num_users = int(self.meta["num-users"])
        self.num_items = int(self.meta["num-items"])
        self.partition_id = int(self.meta["partition-id"])
        self.num_partitions = int(self.meta["num-partitions"])
        arrays = {name: np.load(self.path / f"{name}.npy") for name in ARRAYS}
        self.users = arrays["users"]
        own = users_of_partition(self.partition_id, self.num_partitions, self.num_users)
        if self.users.tolist() != self.meta["users"] or not np.array_equal(self.users, own):
            raise ValueError(
                f"{self.path}: users.npy, the manifest's users and partition "
                f"{self.partition_id} of {self.num_partitions} disagree: export it again."
            )
        self.train_indptr = arrays["train_indptr"]
        self.train_items = arrays["train_items"]
        self.valid_item = _ByUser(self, arrays["valid_item"])
        self.test_item = _ByUser(self, arrays["test_item"])
        self._eval_negatives = {}
        if self.protocol == "paper":
            negatives = np.load(self.path / "eval_negatives.npy")
            self._eval_negatives[self.seed] = _ByUser(self, negatives)

    def exclusions_of(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`PreparedData.exclusions_of`, user by user (a device holds few)."""
        parts = [self.negative_exclusion(int(u)) for u in users]
        counts = np.array([len(p) for p in parts], dtype=np.int64)
        return counts, np.concatenate(parts) if parts else np.empty(0, np.int64)

    def local(self, users: np.ndarray | int) -> np.ndarray | int:
        """Positions in this device's arrays of global user ids; KeyError for other users."""
        ids = np.asarray(users, dtype=np.int64)
        positions = np.searchsorted(self.users, ids)
        inside = positions < len(self.users)
        if not (inside.all() and np.array_equal(self.users[positions], ids)):
            raise KeyError(f"{self.path} holds users {self.meta['users'][:5]}..., not {users}")
        return int(positions) if positions.ndim == 0 else positions

    def train_positives(self, user: int) -> np.ndarray:
        at = self.local(user)
        return np.asarray(self.train_items[self.train_indptr[at] : self.train_indptr[at + 1]])

    def eval_negatives(self, seed: int) -> PerUser:
        """Paper protocol: the exported negatives (drawn with the export's seed; another seed
        is refused). Strict (the ``s100-*`` metrics): drawn here for this device's users, the
        rows the shared split draws (keyed by (seed, user)), for any seed."""
        if seed not in self._eval_negatives and self.protocol == "strict":
            negatives = self._draw_eval_negatives(seed, self.users)
            self._eval_negatives[seed] = _ByUser(self, negatives)
        if seed not in self._eval_negatives:
            raise ValueError(
                f"{self.path} holds the paper protocol's evaluation negatives of seed "
                f"{self.seed}, the run asks for seed {seed}: export again with --seed {seed}."
            )
        return self._eval_negatives[seed]

    @cached_property
    def num_train_rows(self) -> int:
        return int(self.train_indptr[-1])

    def identity(self) -> DataIdentity:
        return DataIdentity(
            dataset=self.dataset,
            protocol=self.protocol,
            seed=self.seed,
            fingerprint=self.meta["fingerprint"],
            num_users=self.num_users,
            num_items=self.num_items,
            source=f"device {self.path.resolve().name}",
        )


def shared_identity(prepared: PreparedData, seed: int) -> DataIdentity:
    """The identity of the shared prepared split (every node reads it; negatives of ``seed``)."""
    return DataIdentity(
        dataset=prepared.dataset,
        protocol=prepared.protocol,
        seed=seed,
        fingerprint=split_fingerprint(prepared),
        num_users=prepared.num_users,
        num_items=prepared.num_items,
        source="shared",
    )
