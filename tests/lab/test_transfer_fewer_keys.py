"""``bench/transfer_fewer_keys.py``: the studies it runs, each arm's ratios and the paired
fewer-minus-all differences, on fake cells (no run here)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from fedrec_flwr.config import RunConfig
from fedrec_lab import tuning
from fedrec_lab.transfer import fewer_keys as fewer

USERS = 200


def cell(source: str, target: str, rate: float, method: str = "fedmf") -> dict:
    hits = (np.arange(USERS) < round(rate * USERS)).astype(float)
    return {"method": method, "candidate": source, "target": target, "best_round": 40,
            "rounds": 100, "val_hr10": rate, "test_hr10": float(hits.mean()),
            "test_ndcg10": float(hits.mean()) / 2, "seconds": 1.0,
            "users": list(range(USERS)), "hits": hits.tolist()}  # fmt: skip


def arm(rates: dict[tuple[str, str], float]) -> list[dict]:
    return [cell(source, target, rate) for (source, target), rate in rates.items()]


# all keys: best at home, poor away; fewer keys: a little lower at home, better away
ALL = {("ml100k", "ml100k"): 0.20, ("ml100k", "lastfm2k"): 0.10, ("ml100k", "synthetic"): 0.40,
       ("lastfm2k", "ml100k"): 0.15, ("lastfm2k", "lastfm2k"): 0.20,
       ("lastfm2k", "synthetic"): 0.30}  # fmt: skip
FEWER = {("ml100k", "ml100k"): 0.18, ("ml100k", "lastfm2k"): 0.16, ("ml100k", "synthetic"): 0.40,
         ("lastfm2k", "ml100k"): 0.17, ("lastfm2k", "lastfm2k"): 0.19,
         ("lastfm2k", "synthetic"): 0.36}  # fmt: skip
KNN = {t: {"method": "itemknn", "candidate": "k=50", "target": t, "test_hr10": 0.1,
           "users": list(range(USERS)), "hits": [1.0] * 20 + [0.0] * 180}
       for t in ("ml100k", "lastfm2k", "synthetic")}  # fmt: skip


def report() -> dict:
    by_arm = {"all": arm(ALL), "fewer": arm(FEWER)}
    return fewer.assemble(by_arm, arm(ALL), KNN, ["fedmf"], seed=0)


def test_ratios_are_to_the_same_arms_own_setting_and_differences_are_paired():
    rows = {(r["source"], r["target"]): r for r in report()["cells"]}
    moved = rows[("ml100k", "lastfm2k")]
    assert moved["all"]["ratio"] == pytest.approx(0.10 / 0.20)
    assert moved["fewer"]["ratio"] == pytest.approx(0.16 / 0.19)
    # the same users, the first 32 hit against the first 20: exactly +6 points
    assert moved["fewer_minus_all"]["mean"] == pytest.approx(0.06)
    assert moved["fewer_minus_all"]["low"] > 0
    # generated data: the arm's best measured there
    assert rows[("lastfm2k", "synthetic")]["fewer"]["ratio"] == pytest.approx(0.36 / 0.40)


def test_leave_one_out_per_arm_and_the_report_counts_the_transfers():
    data = report()
    worst = {(c["arm"], s["candidate"]): s["worst_ratio"]
             for c in data["choices"] for s in c["candidates"]}  # fmt: skip
    assert worst[("all keys", "ml100k")] == pytest.approx(0.5)
    assert worst[("fewer keys", "ml100k")] == pytest.approx(0.16 / 0.19)
    data["studies"] = []
    args = argparse.Namespace(trials=16, study_rounds=60, study_patience=10, seed=0,
                              rounds=100, studies="S")  # fmt: skip
    text = fewer.markdown(data, "python bench/transfer_fewer_keys.py --data-dir DIR", args)
    assert "--trials 16 --rounds 60 --patience 10 --seed 0`" in text
    assert (
        "| fedmf | ML-100K | Last.fm-2K | 10.00 (0.500) | 10.00 (0.500) | 16.00 (0.842) |" in text
    )
    assert (
        "Of 4 transfers (a setting on a dataset it was not tuned on), the fewer-keys setting is "
        "above the all-keys one with an interval above zero in 3, below it with an interval "
        "below zero in 0, and within the noise in 1. On the 2 datasets the settings were tuned "
        "on, the fewer-keys setting is above the all-keys one with an interval above zero in 0, "
        "below it with an interval below zero in 1, and within the noise in 1." in text
    )


@pytest.mark.parametrize("method", sorted(fewer.HELD))
def test_the_held_keys_are_tuned_keys_and_leave_the_two_rates(method):
    """What the fewer-keys studies hold is in the method's space, valid, and leaves lr and
    item-lr: the settings the script passes parse as ``fedrec tune`` takes them."""
    setup = tuning.parse(["--method", method, "--dataset", "synthetic",
                          *fewer.held_settings(method, "fewer")])  # fmt: skip
    assert list(setup.space) == ["lr", "item-lr"]
    RunConfig.from_mapping({**setup.config, "dataset": "synthetic"})
    assert fewer.held_settings(method, "all") == []
