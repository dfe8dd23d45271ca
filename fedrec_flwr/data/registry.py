"""The one list of datasets: each one's file, loader, download source, description and keys.

Everything else derives from :data:`DATASETS`: the names the ``dataset`` key accepts
(:class:`DataKeys`), the download table (``download.DATASETS``, the datasets with a source),
the loader table (``loaders.LOADERS``) and the run-config keys of a dataset (its
``config_keys``, checked when it is the run's dataset). Add a dataset here, write its loader in
:mod:`fedrec_flwr.data.loaders`, and add its row to the README's dataset table.

This module imports nothing heavy and of the project only the schema (and the keys of the
dataset ``file``, :mod:`fedrec_flwr.data.user_keys`) at import time
(``config`` imports it); a loader is named, and imported from :mod:`fedrec_flwr.data.loaders`
on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from fedrec_flwr.data.user_keys import FILE_DATASET, FileKeys
from fedrec_flwr.schema import POSITIVE, ConfigError, Group, Range, RunValues, key

if TYPE_CHECKING:
    from fedrec_flwr.data.interactions import Interactions

LOADERS_MODULE = "fedrec_flwr.data.loaders"


@dataclass(frozen=True)
class DatasetSource:
    """Where one dataset's raw file lives and how to check it.

    ``archive_sha256`` is the sha256 of the downloaded bytes (the zip, or the file itself when
    the URL is not a zip); ``file_sha256`` is that of the extracted file with CRLF line endings
    normalised to LF. ``shape`` (users, items, rows) is what the loader must produce; it is
    checked after a download.
    """

    folder: str  # sub-folder of data-dir and of the cache
    file: str  # the file the loader reads (extracted from the archive when the URL is a zip)
    url: str | None
    homepage: str
    archive_sha256: str | None = None
    file_sha256: str | None = None
    shape: tuple[int, int, int] | None = None
    alternatives: tuple[str, ...] = ()  # other files the loader reads instead if present

    @property
    def accepted(self) -> tuple[str, ...]:
        """Files any one of which lets the loader run."""
        return (*self.alternatives, self.file)


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset: its run-config name, how it is read and where it comes from.

    ``source`` is None for a generated dataset (``synthetic``), which has no file and no
    loader; every other dataset has both. ``config_keys``: its own run-config keys (checked
    only when it is the run's dataset).
    """

    name: str  # the run-config value `dataset`
    loader: str | None  # name of the function in fedrec_flwr.data.loaders that reads the file
    source: DatasetSource | None  # folder, file, download URL and checksums
    description: str  # one line
    config_keys: type[Group] | None = None

    def __post_init__(self) -> None:
        if (self.loader is None) != (self.source is None):
            raise ValueError(f"dataset {self.name!r}: give both a loader and a source, or neither")

    @property
    def file(self) -> str | None:
        """The file read, relative to data-dir (``ml-100k/u.data``); None if generated."""
        return None if self.source is None else f"{self.source.folder}/{self.source.file}"

    @property
    def loader_function(self) -> Callable[[Path], Interactions]:
        """The loader itself (imports :mod:`fedrec_flwr.data.loaders`, hence pandas)."""
        if self.loader is None:
            raise ValueError(f"dataset {self.name!r} is generated: it has no loader")
        return getattr(importlib.import_module(LOADERS_MODULE), self.loader)

    def load(self, folder: Path) -> Interactions:
        """Read the dataset from ``folder`` (``<data-dir>/<source folder>``)."""
        return self.loader_function(folder)


class TrainPairs(StrEnum):
    """``train-pairs``: a user's train rows, every row or one per distinct (user, item) pair."""

    ALL = "all"
    DISTINCT = "distinct"


def check_synthetic(config: RunValues) -> None:
    keys = config.group(SyntheticKeys)
    if keys.synthetic_items < 2 * keys.synthetic_mean_degree:
        raise ConfigError(
            "synthetic-items must be at least twice synthetic-mean-degree so that "
            "negatives can be sampled."
        )


class SyntheticKeys(Group):
    title = "Synthetic dataset"

    synthetic_users: int = key(
        default=1000,
        help="`synthetic` dataset: users",
        range=POSITIVE,
    )
    synthetic_items: int = key(
        default=2000,
        help="`synthetic` dataset: items (at least twice `synthetic-mean-degree`)",
    )
    synthetic_mean_degree: int = key(
        default=50,
        help="`synthetic` dataset: mean items per user",
        range=Range(5),
        why=" (every synthetic user has >= 5 items)",
    )

    check = check_synthetic


# Where the checksums come from (none could be re-checked here: no network):
# - ml-100k.zip, ml-1m.zip: sha256 pinned alike by many independent projects (the keras-rs
#   examples among them); GroupLens publishes md5 files beside the zips (0e33842e..., c4d9eecf...)
#   that other projects check.
# - u.data, user_taggedartists.dat (CRLF->LF): computed on the project's reference copies.
# - hetrec2011-lastfm-2k.zip: pinned alike by several projects (OmniRec among them).
# - ratings_Amazon_Instant_Video.csv, filmtrust.zip: as pinned by OmniRec's data loaders.
_SPECS = (
    DatasetSpec(
        name="ml-100k",
        loader="load_ml100k",
        source=DatasetSource(
            folder="ml-100k",
            file="u.data",
            url="https://files.grouplens.org/datasets/movielens/ml-100k.zip",
            homepage="https://grouplens.org/datasets/movielens/100k/",
            archive_sha256="50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
            file_sha256="06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490",
            shape=(943, 1682, 100_000),
        ),
        description="MovieLens-100K ratings: 943 users x 1,682 movies, 100,000 rows",
    ),
    DatasetSpec(
        name="ml-1m",
        loader="load_ml1m",
        source=DatasetSource(
            folder="ml-1m",
            file="ratings.dat",
            url="https://files.grouplens.org/datasets/movielens/ml-1m.zip",
            homepage="https://grouplens.org/datasets/movielens/1m/",
            archive_sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
            shape=(6040, 3706, 1_000_209),
        ),
        description="MovieLens-1M ratings: 6,040 users x 3,706 movies, 1,000,209 rows",
    ),
    DatasetSpec(
        name="lastfm-2k",
        loader="load_lastfm2k",
        source=DatasetSource(
            folder="lastfm-2k",
            file="user_taggedartists.dat",
            url="https://files.grouplens.org/datasets/hetrec2011/hetrec2011-lastfm-2k.zip",
            homepage="https://grouplens.org/datasets/hetrec-2011/",
            archive_sha256="6738f48195667ff03caaab4d32ca9a3133d8cc026b7c3cdaf6ce1010e913c59c",
            file_sha256="c4a9ffae9ab47a9f9b2f0678ab1f7e5c1db4ca818837d8cddd1f5699c5bbf048",
            shape=(1600, 12_454, 185_650),
            alternatives=("user_taggedartists-timestamps.dat",),
        ),
        description="Last.fm-2K (HetRec 2011) tag assignments: 1,600 users x 12,454 artists",
    ),
    DatasetSpec(
        name="amazon-video",
        loader="load_amazon_video",
        source=DatasetSource(
            folder="amazon-video",
            file="ratings_Amazon_Instant_Video.csv",
            url="https://snap.stanford.edu/data/amazon/productGraph/categoryFiles/"
            "ratings_Amazon_Instant_Video.csv",
            homepage="https://jmcauley.ucsd.edu/data/amazon/",
            archive_sha256="249e1061d30db8c1230e4f3edd0523be12c37e6a8e6b9872a312cf6c326f157b",
        ),
        description="Amazon Instant Video ratings, reviewers with 5 or more ratings",
    ),
    DatasetSpec(
        name="filmtrust",
        loader="load_filmtrust",
        source=DatasetSource(
            folder="filmtrust",
            file="ratings.txt",
            url="https://guoguibing.github.io/librec/datasets/filmtrust.zip",
            homepage="https://guoguibing.github.io/librec/datasets.html",
            archive_sha256="de4a55cb4ae26f663d88e9ad1ba1fae2d0d6d7a7499e37dc5245bab470c2d13c",
        ),
        description="FilmTrust ratings (no timestamps: the line order stands in for time)",
    ),
    DatasetSpec(
        name="synthetic",
        loader=None,
        source=None,
        description="seeded synthetic data: power-law degrees, clustered tastes (synthetic-*)",
        config_keys=SyntheticKeys,
    ),
    DatasetSpec(
        name=FILE_DATASET,
        loader=None,  # read by fedrec_flwr.data.user_dataset, configured by its keys
        source=None,
        description="your own interaction file: CSV, TSV, Parquet or RecBole .inter (data-file)",
        config_keys=FileKeys,
    ),
)

DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in _SPECS}

# The datasets read from a file, with their sources: download.DATASETS is this very dict.
SOURCES: dict[str, DatasetSource] = {
    name: spec.source for name, spec in DATASETS.items() if spec.source is not None
}


def dataset_names() -> list[str]:
    """Every dataset name, in the registry's order (generated ones included)."""
    return list(DATASETS)


def dataset_key_groups() -> dict[type[Group], str]:
    """The run-config keys of each dataset that has some, in the registry's order: group ->
    its dataset (its keys are checked when it is the run's dataset)."""
    return {spec.config_keys: name for name, spec in DATASETS.items() if spec.config_keys}


#: Which dataset, and where its files are.
class DataKeys(Group):
    title = "Data"

    dataset: str = key(
        default="ml-100k",
        help="the dataset (`docs/getting-started.md`: where each one is read from)",
        choices=dataset_names,
    )
    data_dir: str = key(
        default="",
        help="folder with one sub-folder per dataset; empty: `$FEDREC_DATA_DIR`, else download "
        "into the cache",
    )
    train_pairs: str = key(
        default="all",
        help="a user's train rows: `all` (under `paper`, a repeated (user, item) pair stays one "
        "row per repeat: Last.fm-2K has one row per tag assignment) or `distinct` (one row "
        "per pair, the first in file order: the train positives of FedRecGEL's reference "
        "code); the held-out items, evaluation negatives and users are the same either way; "
        "under `strict`, whose pairs are already distinct, both give the same split",
        choices=TrainPairs,
    )
