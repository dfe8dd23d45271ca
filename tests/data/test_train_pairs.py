"""``train-pairs``: one train row per distinct (user, item) pair under ``paper``, with the
held-out items, evaluation negatives and users of the split that keeps every row."""

import numpy as np
import pytest

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.data.prepared import PreparedData, dataset_fingerprint, prepare, prepared_path


@pytest.fixture
def repeats_file(tmp_path, monkeypatch):
    """Twelve users of 40 rows over 300 items, each with a few repeated pairs."""
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    lines = ["user_id,item_id,timestamp"]
    for user in range(12):
        items = rng.choice(300, size=30, replace=False)
        items = np.r_[items, rng.choice(items, size=10)]  # 10 repeats
        for stamp, item in enumerate(rng.permutation(items)):
            lines.append(f"u{user},i{item},{stamp}")
    path = tmp_path / "repeats.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def config(path, protocol: str, pairs: str) -> RunConfig:
    return RunConfig.from_mapping(
        {"dataset": "file", "data-file": str(path), "protocol": protocol, "train-pairs": pairs}
    )


def held_out(prepared: PreparedData) -> list[np.ndarray]:
    return [np.asarray(getattr(prepared, n)) for n in ("valid_item", "test_item", "source_user")]


def test_distinct_pairs_keep_the_held_out_items_and_eval_negatives(repeats_file):
    every = prepare(config(repeats_file, "paper", "all"))
    distinct = prepare(config(repeats_file, "paper", "distinct"))
    assert every.path != distinct.path  # its own cache entry
    assert (every.num_users, every.num_items) == (distinct.num_users, distinct.num_items)
    for a, b in zip(held_out(every), held_out(distinct), strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(every.eval_negatives(3), distinct.eval_negatives(3))
    assert every.num_train_rows > distinct.num_train_rows
    for user in range(every.num_users):
        rows = every.train_positives(user)
        _, first = np.unique(rows, return_index=True)
        assert np.array_equal(distinct.train_positives(user), rows[np.sort(first)])
        assert np.array_equal(every.negative_exclusion(user), distinct.negative_exclusion(user))
    assert distinct.meta["train_pairs"] == "distinct"
    removed = {step["name"]: step["rows"] for step in distinct.meta["card"]["removed"]}
    assert removed["repeated train pairs (train-pairs = distinct)"] == (
        every.num_train_rows - distinct.num_train_rows
    )


def test_the_default_and_strict_keep_their_cache_key(repeats_file):
    every = config(repeats_file, "paper", "all")
    assert "train-pairs" not in dataset_fingerprint(every)  # existing caches stay valid
    assert "train-pairs" in dataset_fingerprint(config(repeats_file, "paper", "distinct"))
    strict = config(repeats_file, "strict", "all")
    strict_distinct = config(repeats_file, "strict", "distinct")
    assert prepared_path(strict) == prepared_path(strict_distinct)  # the same split
    assert prepare(strict).num_train_rows == prepare(strict_distinct).num_train_rows


def test_an_unknown_value_is_refused(repeats_file):
    with pytest.raises(ConfigError, match="distinct"):
        config(repeats_file, "paper", "unique")
