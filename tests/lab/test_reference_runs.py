"""The reference-run scripts' own parts (bench/reference/, :mod:`fedrec_lab.reference`): the
log they parse, the rounds they choose, the files they write for the reference code, the
commit they pin. No reference code is needed: the logs are tiny fakes in the drivers'
format."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedrec_lab.reference import runs as ref
from fedrec_lab.reference.batches import SameBatches
from fedrec_lab.reference.ratings import reference_files

LOG = """\
[2026-01-01 10:00:00] prepare lastfm2k dataset...
[2026-01-01 10:00:05] round 1 valid HR@10=0.500000 NDCG@10=0.300000
[2026-01-01 10:00:05] round 1 test HR@10=0.480000 NDCG@10=0.290000
[2026-01-01 10:00:05] HR@10: 0.4800	NDCG@10: 0.2900
2026-01-01 10:00:09,001-INFO-round 2 valid HR@10=0.600000 NDCG@10=0.350000
round 2 test HR@10=0.550000 NDCG@10=0.330000
round 3 test HR@10=0.700000 NDCG@10=0.400000
round 3 valid HR@10=0.600000 NDCG@10=0.360000
"""


def test_rounds_are_read_from_the_driver_lines_only() -> None:
    rounds = ref.parse_rounds(LOG)
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert rounds[0]["test"] == {"hr@10": 0.48, "ndcg@10": 0.29}
    assert rounds[2]["valid"] == {"hr@10": 0.6, "ndcg@10": 0.36}


def test_selection_on_validation_takes_the_earliest_best_round() -> None:
    rounds = ref.parse_rounds(LOG)
    on_valid, on_test = ref.chosen(rounds, "valid"), ref.chosen(rounds, "test")
    assert on_valid["best_round"] == 2  # round 3 ties on validation: the earlier one
    assert on_valid["test"] == {"hr@10": 0.55, "ndcg@10": 0.33}
    assert on_test["best_round"] == 3


def test_a_round_without_both_splits_is_refused_unless_it_ends_a_partial_log() -> None:
    cut = LOG + "round 4 valid HR@10=0.9 NDCG@10=0.5\n"
    with pytest.raises(ref.ReferenceError, match="round 4"):
        ref.parse_rounds(cut)
    assert len(ref.parse_rounds(cut, partial=True)) == 3
    with pytest.raises(ref.ReferenceError, match="two 'test' lines"):
        ref.parse_rounds(LOG + "round 3 test HR@10=0.1 NDCG@10=0.1\n")
    with pytest.raises(ref.ReferenceError, match=r"not 1\.\.3: \[1, 3, 5\]"):
        ref.parse_rounds(LOG.replace("round 2", "round 5"), partial=True)


def test_collected_seeds_are_cut_to_the_rounds_all_completed(tmp_path: Path) -> None:
    (tmp_path / "seed0").mkdir()
    (tmp_path / "seed0" / "driver.log").write_text(LOG)
    (tmp_path / "seed1").mkdir()
    (tmp_path / "seed1" / "driver.log").write_text(LOG.split("round 3 test")[0])
    out = tmp_path / "out.json"
    record = {"rounds_planned": 100}
    ref.collect_seeds(tmp_path, [0, 1], record, out)
    assert record["rounds_logged"] == 2
    assert [len(s["rounds"]) for s in record["seeds"]] == [2, 2]
    assert "after 2 of 100 rounds" in record["stopped"]
    assert out.exists()


def small_split() -> ref.Split:
    return ref.Split(
        train_user=np.array([0, 0, 1, 1, 1]),
        train_item=np.array([3, 3, 0, 4, 2]),
        valid_item=np.array([1, 5]),
        test_item=np.array([2, 1]),
        valid_negatives=np.array([[0, 4], [3, 0]]),
        test_negatives=np.array([[5, 0], [3, 5]]),
        num_items=6,
    )


def test_ncf_files_hold_the_split_in_the_reference_layout(tmp_path: Path) -> None:
    files = ref.write_ncf_files(small_split(), tmp_path)
    assert files["train"].read_text().split() == ["0,3", "0,3", "1,0", "1,4", "1,2"]
    assert files["test"].read_text().splitlines() == ["(0, 2)\t5\t0", "(1, 1)\t3\t5"]
    assert files["valid"].read_text().splitlines() == ["(0, 1)\t0\t4", "(1, 5)\t3\t0"]


def test_the_pfedrec_file_splits_into_our_split_under_the_reference_rule(tmp_path: Path) -> None:
    """The reference numbers users and items by first appearance and ranks each user's rows
    newest first, the earlier row first among ties (pandas rank 'first'); the file must give
    back our held-out items, and the negatives must name the same items in its numbering."""
    split = small_split()
    arrays = reference_files(split, tmp_path)
    rows = pd.read_csv(tmp_path / "ratings.dat", header=None, names=["u", "i", "r", "t"])
    numbering = {item: k for k, item in enumerate(rows["i"].drop_duplicates())}
    rows["rank"] = rows.groupby("u")["t"].rank(method="first", ascending=False)
    test = rows[rows["rank"] == 1].set_index("u")["i"]
    valid = rows[rows["rank"] == 2].set_index("u")["i"]
    assert test.tolist() == split.test_item.tolist()
    assert valid.tolist() == split.valid_item.tolist()
    assert sorted(rows[rows["rank"] > 2]["i"]) == sorted(split.train_item)
    ours = np.c_[split.valid_negatives, split.test_negatives]
    assert (arrays["negatives"] == np.vectorize(numbering.get)(ours)).all()
    assert arrays["valid_items"].tolist() == [numbering[i] for i in split.valid_item]


def test_an_item_in_no_row_is_refused(tmp_path: Path) -> None:
    split = small_split()
    bigger = ref.Split(**{**split.__dict__, "num_items": 7})
    with pytest.raises(ref.ReferenceError, match="1 items appear in no row"):
        reference_files(bigger, tmp_path)


def test_a_checkout_at_another_commit_is_refused_with_the_fetch_command(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "f").write_text("x")
    git("add", "f")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    head = ref.repo_commit(tmp_path)
    ref.check_commit(tmp_path, head, "URL")
    with pytest.raises(ref.ReferenceError, match=f"git -C {tmp_path} checkout {'0' * 40}"):
        ref.check_commit(tmp_path, "0" * 40, "URL")
    with pytest.raises(ref.ReferenceError, match="not a git checkout"):
        ref.check_commit(tmp_path / "f", head, "URL")


def test_a_second_run_in_the_same_folder_is_refused(tmp_path: Path) -> None:
    """A run in progress keeps its folder: a second one would truncate its log."""
    (tmp_path / "running").touch()
    (tmp_path / "driver.log").write_text(LOG)
    settings = {"seed": 0}
    with pytest.raises(ref.ReferenceError, match="a run is going in"):
        ref.run_driver(tmp_path / "driver.py", settings, tmp_path, rounds=3)
    assert (tmp_path / "driver.log").read_text() == LOG


def test_a_driver_run_writes_its_log_and_frees_the_folder(tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(f"print({LOG!r})\n")
    record = ref.run_driver(driver, {"seed": 4}, tmp_path / "work", rounds=3)
    assert record["seed"] == 4 and record["chosen_on_valid"]["best_round"] == 2
    assert not (tmp_path / "work" / "running").exists()
    with pytest.raises(ref.ReferenceError, match=r"3 rounds in .*, not 2"):
        ref.run_driver(driver, {"seed": 4}, tmp_path / "work", rounds=2)


def test_the_fedrap_fast_loader_yields_dataloaders_batches_from_the_same_draws() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    tensors = (
        torch.arange(4500, dtype=torch.long),
        torch.arange(4500, dtype=torch.long) * 3,
        torch.rand(4500, generator=torch.Generator().manual_seed(1)),
    )

    def epochs(loader) -> tuple[list[list[torch.Tensor]], torch.Tensor]:
        torch.manual_seed(7)
        batches = [[t.clone() for t in batch] for _ in range(3) for batch in loader]
        return batches, torch.rand(4)  # the global generator after the epochs

    expected, after = epochs(DataLoader(TensorDataset(*tensors), batch_size=2048, shuffle=True))
    got, got_after = epochs(SameBatches(tensors, 2048))
    assert [len(b[0]) for b in got] == [2048, 2048, 404] * 3
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b)
    assert torch.equal(got_after, after)
    assert not torch.equal(got[0][0], got[3][0])  # each epoch shuffles afresh
