"""The reproducibility page says what the committed results say: each figure of ours equals its
source file's (the page is rendered from them and must be the committed page)."""

import numpy as np
import pytest

from fedrec_lab.claims import page, sources
from fedrec_lab.claims.entries import claims
from fedrec_lab.claims.verdicts import CONTRADICTED, NOT_MEASURABLE, NOT_REPRODUCED, REPRODUCED


def test_the_page_is_what_the_results_files_say():
    committed = (sources.root() / page.PAGE).read_text()
    assert committed == page.render(), (
        "docs/claims.md differs from the committed results: run `python -m fedrec_lab.claims`"
    )


def test_every_claim_names_its_files_and_a_verdict():
    for claim in claims():
        measured = claim.measure()
        assert measured.verdict in (REPRODUCED, NOT_REPRODUCED, CONTRADICTED, NOT_MEASURABLE)
        assert measured.why, claim.claim
        if measured.verdict != NOT_MEASURABLE:
            assert measured.files and measured.ours != "-", claim.claim


def test_a_cell_is_read_from_its_row_and_column(tmp_path, monkeypatch):
    (tmp_path / "t.md").write_text(
        "# t\n\n| a | b | c |\n|---|---|---|\n| x | 1 | 2.5 ± 0.1 |\n| y | 1 | 3 |\n\ntext\n"
    )
    monkeypatch.setattr(sources, "root", lambda: tmp_path)
    assert sources.table_cell("t.md", {"a": "x", "b": "1"}, "c") == "2.5 ± 0.1"
    assert sources.first_number("2.5 ± 0.1") == 2.5
    with pytest.raises(ValueError, match="2 rows match"):
        sources.table_cell("t.md", {"b": "1"}, "c")
    with pytest.raises(ValueError, match="no table with the columns"):
        sources.table_cell("t.md", {"a": "x"}, "d")


def test_the_seed_difference_is_the_means_with_two_standard_errors(monkeypatch):
    values = {"a": [0.10, 0.12, 0.14], "b": [0.10, 0.10, 0.10]}
    monkeypatch.setattr(sources.Runs, "test_values", lambda self, metric: values[self.family])
    d = sources.seed_difference(
        sources.Runs("a", "ml-100k", "strict"), sources.Runs("b", "ml-100k", "strict")
    )
    error = 2 * np.sqrt(np.var([10, 12, 14], ddof=1) / 3)
    assert d["mean"] == pytest.approx(2.0)
    assert (d["low"], d["high"]) == pytest.approx((2.0 - error, 2.0 + error))


def test_a_sam_row_without_per_user_values_is_listed_not_judged():
    from fedrec_lab.claims.analyses import sam_effect

    def row(method, difference):
        measure = {"difference": difference} if difference else {}
        return {
            "seeds": [0],
            "method": method,
            "dataset": "ml-100k",
            "protocol": "paper",
            "hr@10": measure,
            "early_best": [],
        }

    judge = sam_effect("hr@10", lower_is_claimed=False)
    higher = {"mean": 1.0, "low": 0.5, "high": 1.5}
    ours, _, why = judge([[row("FedMF", higher), row("FedNCF", None)]])
    assert "FedNCF ml-100k paper (seed 0): no interval" in ours
    assert "in 1 of 1 rows" in why and "1 row without an interval" in why
    assert "devices" not in ours and "different devices" not in why
    mixed = [{"seed": 0, "without": "cpu", "with": "cuda"}]
    ours, _, why = judge([[{**row("FedMF", higher), "mixed_devices": mixed}]])
    assert ours == (
        "FedMF ml-100k paper (seed 0): +1.00 [+0.50, +1.50] "
        "(devices: seed 0 without SAM on cpu, with SAM on cuda)"
    )
    assert "1 of the 1 rows pair runs trained on different devices" in why
    assert "left out" not in ours and "left out" not in why
    left = [{"side": "with", "seed": 2, "round": 19}]
    ours, _, why = judge([[{**row("FedMF", higher), "left_out": left}]])
    assert ours.endswith("(left out: seed 2 with SAM (from round 19))")
    assert "1 of the 1 rows leave out a seed whose run had a node's reply left out" in why


def test_the_radius_sweep_lists_each_radius_curve_and_how_far_it_moves():
    from fedrec_lab.analysis.sweep import SCHEDULE
    from fedrec_lab.claims.analyses import radius_spread

    def point(varied, private, shared, hr):
        return {
            "protocol": "paper",
            "varied": varied,
            "private": private,
            "shared": shared,
            "hr": [hr],
            "seed_list": [0],
        }

    values = [
        point("preset", 0.01, 0.01, 44.0),
        point("rp", 0.0, 0.01, 43.0),
        point("rp", 1.0, 0.01, 40.5),
        point("rs", 0.01, 0.0, 44.5),
        {**point("rs", 0.01, 1.0, 0.0), "hr": [], "seed_list": []},  # not measured
    ]
    ours, verdict, why = radius_spread([values])
    rounds = SCHEDULE["paper"]["num-server-rounds"]
    assert ours == (
        f"paper (seed 0, {rounds} rounds): private 0: 43.00, 0.01: 44.00, 1: 40.50; "
        "shared 0: 44.50, 0.01: 44.00"
    )
    assert verdict == NOT_MEASURABLE and "paper private 3.50, paper shared 0.50" in why
    assert radius_spread([[]])[0] == "-"
