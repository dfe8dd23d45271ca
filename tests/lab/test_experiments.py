"""``python -m fedrec_lab.experiments``: table declarations, dry run, resume, a tiny table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedrec_flwr.config import RunConfig
from fedrec_lab.baselines import ROWS
from fedrec_lab.experiments import cells as runner
from fedrec_lab.experiments.command import main
from fedrec_lab.experiments.report import NAMES, RowResult
from fedrec_lab.experiments.sampled import sampled_vs_full, section
from fedrec_lab.experiments.tables import PAPER, TABLES, Table, federated, reference, rows

pytestmark = pytest.mark.usefixtures("private_cache")

SYNTHETIC = ["synthetic-users=30", "synthetic-items=400", "synthetic-mean-degree=12"]
TINY = Table(
    "tiny",
    "tiny test table",
    lambda datasets: (
        [federated(m, d, "strict") for d in datasets for m in ("pfedrec", "fedmf")]
        + [reference("popularity", d, "strict") for d in datasets]
    ),
    ("synthetic",),
    paired=True,
)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_row_resolves(name: str) -> None:
    specs = rows(TABLES[name])
    assert specs
    for spec in specs:
        if spec.kind == "reference":
            assert spec.preset in ROWS
            continue
        path = runner.preset_path(spec)
        assert path.exists(), spec
        config = runner.run_config(
            runner.Cell(spec, 0), Path("runs"), "data", None, {"num-server-rounds": 2}
        )  # 2: the fewest rounds a preset may run (two-round secure item-item sums)
        RunConfig.from_mapping(config)  # every override is a valid run-config key
    names = [c.name for s in specs for c in s.cells([0, 1, 2])]
    assert len(names) == len(set(names)), "two cells share a run folder"


def test_paper_values_beside_paper_rows() -> None:
    table2 = rows(TABLES["pfedrec-table2"])
    assert all(s.protocol == "paper" and s.paper for s in table2)
    dual = {(s.key, s.dataset): s.paper for s in rows(TABLES["pfedrec-table3"])}
    assert dual[("fedmf-dual", "ml-100k")] == PAPER[("pfedrec", "ml-100k")]
    table4 = rows(TABLES["pfedrec-table4"], ("ml-100k",))
    lap = [s for s in table4 if s.protocol == "paper" and s.tag == "lap0.5"]
    assert lap[0].paper == (70.88, 43.21)
    assert dict(lap[0].overrides) == {"ldp-laplace-lambda": 0.5}
    strict = {s.key for s in rows(TABLES["strict"], ("ml-100k",))}
    assert {"pfedrec", "fedrap-plgc", "fedncf-dual", "itemknn", "local-pfedrec"} <= strict


def test_dry_run_lists_cells_and_runs_nothing(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(runner, "run_federated", _forbidden)
    done = tmp_path / "runs" / "pfedrec-ml100k-paper-seed0"
    done.mkdir(parents=True)
    (done / "summary.json").write_text("{}")
    argv = ["pfedrec-table2", "--data-dir", str(tmp_path / "none"), "--out", str(tmp_path)]
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "done       pfedrec-ml100k-paper-seed0" in out
    assert "no data    fedmf-ml1m-paper-seed2" in out
    assert "pfedrec-table2: 48 cells, 0 to run" in out
    assert not (tmp_path / "pfedrec-table2.md").exists()


def _forbidden(*args, **kwargs):
    raise AssertionError("a finished or dataless cell was run")


def _tiny(tmp_path: Path, monkeypatch, *extra: str) -> int:
    monkeypatch.setitem(TABLES, "tiny", TINY)
    argv = ["tiny", "--rounds", "2", "--seeds", "0", "--out", str(tmp_path), "--set", *SYNTHETIC]
    return main([*argv, *extra])


def test_tiny_table_end_to_end_then_nothing_recomputed(tmp_path, monkeypatch) -> None:
    started = []
    real = runner.run_federated
    monkeypatch.setattr(runner, "run_federated", lambda *a: started.append(a) or real(*a))
    assert _tiny(tmp_path, monkeypatch) == 0
    assert len(started) == 2
    text = (tmp_path / "tiny.md").read_text()
    assert "python -m fedrec_lab.experiments tiny --rounds 2" in text
    assert "| synthetic | strict | pfedrec | 1 |" in text
    assert "popularity (centralized)" in text
    assert "strict evaluates 30 users" in text
    assert (tmp_path / "tiny.png").stat().st_size > 0
    runs = tmp_path / "runs"
    config = json.loads((runs / "pfedrec-synthetic-strict-seed0" / "config.json").read_text())
    assert config["num-server-rounds"] == 2 and not Path(config["results-dir"]).is_absolute()
    stamps = {p: p.stat().st_mtime_ns for p in runs.rglob("*")}

    monkeypatch.setattr(runner, "run_federated", _forbidden)
    monkeypatch.setattr(runner, "run_reference", _forbidden)
    assert _tiny(tmp_path, monkeypatch) == 0
    assert {p: p.stat().st_mtime_ns for p in runs.rglob("*")} == stamps

    # leakage: the popularity model scored by full ranking reproduces its strict cell
    extra = dict(pair.split("=") for pair in SYNTHETIC)
    both = sampled_vs_full(runs, "synthetic", 0, "", {k: int(v) for k, v in extra.items()})
    cell = json.loads((runs / "popularity-synthetic-strict-seed0" / "summary.json").read_text())
    assert both["popularity"]["full"]["hr@10"] == pytest.approx(cell["test"]["hr@10"])
    assert both["popularity"]["sampled"]["hr@10"] >= both["popularity"]["full"]["hr@10"]
    # ... and the federated strict cells report their own sampled-100 metrics beside it
    results = [RowResult(s, s.cells([0]), ["done"], runs) for s in TINY.build(("synthetic",))]
    lines = section({"synthetic": both}, NAMES, results)
    for method in ("pfedrec", "fedmf"):
        (row,) = [line for line in lines if f"| {method} (federated, 1 seed) |" in line]
        summary = runs / f"{method}-synthetic-strict-seed0" / "summary.json"
        test = json.loads(summary.read_text())["test"]
        full, sampled = row.split(" | ")[2:4]
        assert full == f"{100 * test['hr@10']:.2f} / {100 * test['ndcg@10']:.2f}"
        assert sampled == f"{100 * test['s100-hr@10']:.2f} / {100 * test['s100-ndcg@10']:.2f}"
    assert any("popularity (centralized)" in line for line in lines)
    assert not any("predates" in line for line in lines)


def test_incomplete_cell_runs_again(tmp_path, monkeypatch) -> None:
    runs = tmp_path / "runs"
    crashed = runs / "fedmf-synthetic-strict-seed0"
    crashed.mkdir(parents=True)
    (crashed / "INCOMPLETE").write_text("This run has not finished: failed: crash.\n")
    for name in ("pfedrec-synthetic-strict-seed0", "popularity-synthetic-strict-seed0"):
        (runs / name).mkdir()
        (runs / name / "summary.json").write_text(
            json.dumps({"test": {"hr@10": 0.1, "ndcg@10": 0.05}, "best_round": 1})
        )
    started = []
    real = runner.run_federated
    monkeypatch.setattr(runner, "run_federated", lambda *a: started.append(a[0]) or real(*a))
    assert _tiny(tmp_path, monkeypatch) == 0
    assert [c["run-name"] for c in started] == ["fedmf-synthetic-strict-seed0"]
    assert (crashed / "summary.json").exists() and not (crashed / "INCOMPLETE").exists()
    aside = [p.name for p in runs.iterdir() if ".incomplete-" in p.name]
    assert len(aside) == 1 and (runs / aside[0] / "INCOMPLETE").exists()


def test_rows_runs_only_those_rows_and_the_table_keeps_its_full_command(
    tmp_path, monkeypatch
) -> None:
    started = []
    real = runner.run_federated
    monkeypatch.setattr(runner, "run_federated", lambda *a: started.append(a[0]) or real(*a))
    assert _tiny(tmp_path, monkeypatch, "--rows", "fedmf", "popularity") == 0
    assert [c["run-name"] for c in started] == ["fedmf-synthetic-strict-seed0"]
    runs = tmp_path / "runs"
    assert not (runs / "pfedrec-synthetic-strict-seed0").exists()
    assert (runs / "popularity-synthetic-strict-seed0" / "summary.json").exists()
    text = (tmp_path / "tiny.md").read_text()
    assert "--rows" not in text and "python -m fedrec_lab.experiments tiny --rounds 2" in text
    with pytest.raises(SystemExit, match=r"fedrecgel not in table tiny.*its rows: fedmf, pfedrec"):
        _tiny(tmp_path, monkeypatch, "--rows", "fedrecgel")


@pytest.mark.slow  # an end-to-end lab run of 15-25 s: the slow tier
def test_backfill_adds_per_user_metrics_only_where_the_rerun_reproduces(
    tmp_path, monkeypatch, capsys
) -> None:
    assert _tiny(tmp_path, monkeypatch) == 0
    runs = tmp_path / "runs"
    pfedrec, fedmf = (runs / f"{m}-synthetic-strict-seed0" for m in ("pfedrec", "fedmf"))
    popularity = runs / "popularity-synthetic-strict-seed0"
    kept = (pfedrec / "per-user.csv").read_bytes()
    kept_reference = (popularity / "per-user.csv").read_bytes()
    for folder in (pfedrec, fedmf, popularity):
        (folder / "per-user.csv").unlink()
    # fedmf's committed rounds were not made by this code: its rerun must not be used
    rounds = (fedmf / "rounds.csv").read_text().splitlines()
    header, last = rounds[0].split(","), rounds[-1].split(",")
    last[header.index("test-hr@10")] = "0.999"
    (fedmf / "rounds.csv").write_text("\n".join([*rounds[:-1], ",".join(last)]) + "\n")
    # pfedrec's were, under an older wire form: other bytes, the same model and metrics
    rounds = (pfedrec / "rounds.csv").read_text().splitlines()
    first = rounds[1].split(",")
    first[header.index("bytes-down")] = str(int(first[header.index("bytes-down")]) - 316)
    (pfedrec / "rounds.csv").write_text("\n".join([rounds[0], ",".join(first), *rounds[2:]]) + "\n")
    capsys.readouterr()
    assert _tiny(tmp_path, monkeypatch, "--backfill-per-user") == 1
    out = capsys.readouterr()
    assert (pfedrec / "per-user.csv").read_bytes() == kept
    assert "pfedrec-synthetic-strict-seed0: per-user.csv added" in out.out
    assert (popularity / "per-user.csv").read_bytes() == kept_reference
    assert "popularity-synthetic-strict-seed0: per-user.csv added" in out.out
    assert not (fedmf / "per-user.csv").exists()
    assert "does not reproduce the cell (round 2, test-hr@10" in out.out
    assert (tmp_path / ".backfill" / "fedmf-synthetic-strict-seed0").exists()
    assert not (tmp_path / ".backfill" / "pfedrec-synthetic-strict-seed0").exists()
    command = next(
        line
        for line in (tmp_path / "tiny.md").read_text().splitlines()
        if line.startswith("python -m fedrec_lab.experiments")
    )
    assert "--backfill-per-user" not in command


@pytest.mark.slow  # an end-to-end lab run of 15-25 s: the slow tier
def test_a_cell_stopped_after_a_checkpoint_continues_and_ends_as_an_uninterrupted_run(
    tmp_path, monkeypatch, capsys
) -> None:
    """A long cell killed in round 8 (checkpoints every 3 rounds) continues after round 6
    instead of starting again; its rounds and summary are those of an uninterrupted run."""
    from server.test_checkpoint import Killed, dies_in, summary_of, without_seconds

    from fedrec_flwr.server_app import run_federation
    from fedrec_lab.local_grid import LocalGrid

    monkeypatch.setitem(TABLES, "tiny", TINY)
    extra = ["--set", *SYNTHETIC, "checkpoint-every=3"]
    argv = ["tiny", "--rounds", "10", "--seeds", "0", "--nodes", "2", *extra]
    assert main([*argv, "--out", str(tmp_path / "full")]) == 0
    name = "pfedrec-synthetic-strict-seed0"
    (cell,) = [c for spec in TINY.build(("synthetic",)) for c in spec.cells([0]) if c.name == name]
    runs = tmp_path / "stopped" / "runs"
    overrides = {k: int(v) for k, v in (p.split("=") for p in extra[1:])}
    config = runner.run_config(cell, runs, "", 10, overrides)
    with pytest.raises(Killed):
        run_federation(
            LocalGrid(dies_in(8, partition=0), config, num_nodes=2), RunConfig.from_mapping(config)
        )
    assert runner.checkpoint_round(runs / name) == 6
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "stopped")]) == 0
    assert f"{name}: unfinished, continues after round 6" in capsys.readouterr().out
    full = tmp_path / "full" / "runs" / name
    assert without_seconds(runs / name) == without_seconds(full)
    assert summary_of(runs / name) == summary_of(full)
    assert not any(".incomplete-" in p.name for p in runs.iterdir())


@pytest.mark.slow  # an end-to-end lab run of 15-25 s: the slow tier
def test_a_run_made_with_other_settings_is_stale_and_runs_again(tmp_path, monkeypatch) -> None:
    assert _tiny(tmp_path, monkeypatch) == 0
    runs = tmp_path / "runs"
    started = []
    real = runner.run_federated
    monkeypatch.setattr(runner, "run_federated", lambda *a: started.append(a[0]) or real(*a))
    # Same cells, another learning rate (as after retuning a preset): every federated cell
    # is stale, set aside and run again; a key that only changes speed does not matter.
    assert _tiny(tmp_path, monkeypatch, "torch-threads=2") == 0
    assert started == []
    assert _tiny(tmp_path, monkeypatch, "lr=0.05") == 0
    assert sorted(c["run-name"] for c in started) == [
        "fedmf-synthetic-strict-seed0",
        "pfedrec-synthetic-strict-seed0",
    ]
    assert all(c["lr"] == 0.05 for c in started)
    aside = sorted(p.name.split(".stale-")[0] for p in runs.iterdir() if ".stale-" in p.name)
    assert aside == ["fedmf-synthetic-strict-seed0", "pfedrec-synthetic-strict-seed0"]


def test_another_datasets_keys_never_make_a_run_stale(tmp_path) -> None:
    """A run recorded with other values of the own-file dataset's keys (its column mapping)
    is this cell's: a synthetic run never reads them. A learning key still counts."""
    (cell,) = [c for spec in TINY.build(("synthetic",)) for c in spec.cells([0])][:1]
    runs = tmp_path / "runs"
    (runs / cell.name).mkdir(parents=True)
    recorded = RunConfig.from_mapping(runner.run_config(cell, runs, "", None, {})).to_mapping()
    config = runs / cell.name / "config.json"
    config.write_text(json.dumps({**recorded, "user-column": "user_id", "item-column": "x"}))
    assert runner.stale_keys(cell, runs, "") == []
    config.write_text(json.dumps({**recorded, "user-column": "user_id", "lr": 123.0}))
    assert runner.stale_keys(cell, runs, "") == ["lr"]


def test_leakage_section_marks_federated_runs_that_predate_the_sampled_metrics(tmp_path):
    """A tiny leakage table from written summaries: a strict cell with ``s100-*`` shows full
    against sampled-100 (mean over its seeds), one without shows '-' and the note; paper
    cells are not rows of this section."""
    runs = tmp_path / "runs"
    specs = [
        federated("pfedrec", "synthetic", "strict"),
        federated("fedmf", "synthetic", "strict"),
        federated("pfedrec", "synthetic", "paper"),
    ]
    tests = {
        "pfedrec-synthetic-strict-seed0": {"hr@10": 0.1, "ndcg@10": 0.05, "s100-hr@10": 0.5},
        "pfedrec-synthetic-strict-seed1": {"hr@10": 0.2, "ndcg@10": 0.07, "s100-hr@10": 0.7},
        "fedmf-synthetic-strict-seed0": {"hr@10": 0.1, "ndcg@10": 0.04},
        "fedmf-synthetic-strict-seed1": {"hr@10": 0.3, "ndcg@10": 0.06},
        "pfedrec-synthetic-paper-seed0": {"hr@10": 0.9, "ndcg@10": 0.6},
        "pfedrec-synthetic-paper-seed1": {"hr@10": 0.9, "ndcg@10": 0.6},
    }
    for name, test in tests.items():
        if "s100-hr@10" in test:
            test["s100-ndcg@10"] = test["s100-hr@10"] / 2
        (runs / name).mkdir(parents=True)
        (runs / name / "summary.json").write_text(json.dumps({"test": test}))
    results = [RowResult(s, s.cells([0, 1]), ["done", "done"], runs) for s in specs]
    lines = section({}, NAMES, results)
    rows = [line for line in lines if line.startswith("| synthetic |")]
    assert rows == [
        "| synthetic | pfedrec (federated, 2 seeds) | 15.00 / 6.00 | 60.00 / 30.00 | 4.0x |",
        "| synthetic | fedmf (federated, 2 seeds) | 20.00 / 5.00 | - | - |",
    ]
    assert any("predates the `s100-*` metrics" in line for line in lines)


def test_the_table_header_command_holds_no_path_of_this_machine() -> None:
    from fedrec_lab.experiments.cells import PROJECT
    from fedrec_lab.experiments.command import _command

    shown = _command(
        [
            "strict",
            "--data-dir",
            "/data/x",
            "--out",
            str(PROJECT / "bench" / "results"),
            "--report-only",
        ]
    )
    assert shown == "python -m fedrec_lab.experiments strict --data-dir DIR --out bench/results"
    assert "--out OUT" in _command(["strict", "--out", "/elsewhere/results"])
    relative = _command(["strict", "--data-dir", "../shared/datasets", "--seeds", "0"])
    assert relative == "python -m fedrec_lab.experiments strict --data-dir DIR --seeds 0"
    assert "--data-dir=DIR" in _command(["strict", "--data-dir=../shared/datasets"])


def test_a_reference_cell_is_given_per_user_values_only_if_its_means_reproduce() -> None:
    from fedrec_lab.experiments.backfill import metrics_difference

    committed = {"val": {"hr@10": 0.25}, "test": {"hr@10": 0.125, "mrr": 0.1}}
    assert metrics_difference(committed, json.loads(json.dumps(committed))) == ""
    changed = {"val": {"hr@10": 0.25}, "test": {"hr@10": 0.125, "mrr": 0.1000001}}
    assert metrics_difference(committed, changed) == "test mrr: 0.1 vs 0.1000001"
    assert metrics_difference(committed, {"val": {}, "test": committed["test"]}) != ""
    more = {"val": {"hr@10": 0.25, "s100-hr@10": 0.5}, "test": {**committed["test"], "x": 1}}
    assert metrics_difference(committed, more) == ""  # metrics added since: not compared


def test_committed_runs_hold_no_path_of_the_machine_that_made_them() -> None:
    runs = Path(__file__).resolve().parents[2] / "bench" / "results" / "runs"
    absolute = []
    for config_file in sorted(runs.glob("*/config.json")):
        config = json.loads(config_file.read_text())
        for key in ("data-dir", "results-dir", "resume"):
            value = config.get(key, "")
            if isinstance(value, str) and Path(value).is_absolute():
                absolute.append(f"{config_file.parent.name}: {key} = {value}")
    assert not absolute, "absolute paths (runner.scrub_paths fixes them): " + "; ".join(absolute)


def test_the_plgc_ablation_switches_off_each_part_alone_and_both_on_every_base() -> None:
    from fedrec_lab.experiments.tables import (
        ABLATION_ROUNDS,
        PLGC_BASES,
        PLGC_WEIGHT,
        plgc_ablation_rows,
    )

    specs = plgc_ablation_rows("strict", ("ml-100k",))
    assert {s.preset for s in specs} == set(PLGC_BASES)
    full = {"plgc-alpha": "ntk", "plgc-decorrelation": PLGC_WEIGHT}
    for base in PLGC_BASES:
        by_tag = {s.tag: dict(s.overrides) for s in specs if s.preset == base}
        suffix = f"-r{ABLATION_ROUNDS}"
        assert set(by_tag) == {
            f"r{ABLATION_ROUNDS}",
            *(
                f"{p}{suffix}"
                for p in ("plgc", "plgc-nobalance", "plgc-nocontrast", "plgc-neither")
            ),
        }
        assert all(o["num-server-rounds"] == ABLATION_ROUNDS for o in by_tag.values())
        assert "plgc" not in by_tag[f"r{ABLATION_ROUNDS}"]  # the base without PLGC
        parts = {
            t.removesuffix(suffix): {k: o[k] for k in full}
            for t, o in by_tag.items()
            if "plgc" in o
        }
        assert parts["plgc"] == full
        assert parts["plgc-nobalance"] == {**full, "plgc-alpha": "0.5"}
        assert parts["plgc-nocontrast"] == {**full, "plgc-decorrelation": 0.0}
        assert parts["plgc-neither"] == {"plgc-alpha": "0.5", "plgc-decorrelation": 0.0}


@pytest.mark.slow  # five end-to-end lab runs of 2 rounds: the slow tier
def test_a_tiny_plgc_ablation_runs_every_part_and_reports_it(tmp_path, monkeypatch) -> None:
    from fedrec_lab.experiments.tables import plgc_ablation_rows

    table = Table(
        "tiny-plgc",
        "tiny PLGC ablation",
        lambda datasets: [
            r for r in plgc_ablation_rows("strict", datasets) if r.preset == "pfedrec"
        ],
        ("synthetic",),
        paired=True,
    )
    monkeypatch.setitem(TABLES, "tiny-plgc", table)
    argv = ["tiny-plgc", "--rounds", "2", "--seeds", "0", "--out", str(tmp_path)]
    assert main([*argv, "--set", *SYNTHETIC]) == 0
    text = (tmp_path / "tiny-plgc.md").read_text()
    for spec in table.build(("synthetic",)):
        (cell,) = spec.cells([0])
        config = json.loads((tmp_path / "runs" / cell.name / "config.json").read_text())
        for key, value in spec.overrides:
            if key != "num-server-rounds":  # --rounds 2 wins in a smoke test
                assert config[key] == value, (cell.name, key)
        assert f"| {spec.key} | 1 |" in text


def test_the_plgc_ablation_compares_each_row_with_its_own_base() -> None:
    from dataclasses import dataclass

    import numpy as np

    from fedrec_lab.experiments.report import paired
    from fedrec_lab.experiments.tables import plgc_ablation_against, plgc_ablation_rows

    specs = plgc_ablation_rows("strict", ("ml-100k",))
    keys = {s.key for s in specs}
    for spec in specs:
        other = plgc_ablation_against(spec)
        if spec.tag == "r30":
            assert other is None
        else:
            assert other in keys and other.startswith(f"{spec.preset}+"), spec.key
    users = np.arange(400)

    @dataclass
    class Fake:  # the parts of a RowResult that the paired comparisons read
        spec: object
        hits: float

        summaries = ({"val": {"hr@10": 0.1}},)

        @property
        def label(self) -> str:
            return self.spec.key

        def per_user(self):
            return [(users, (users % 10 < 10 * self.hits).astype(float))]

    by_key = {s.key: s for s in specs}
    fakes = [
        Fake(by_key["pfedrec+r30"], 0.5),  # the best row: no longer everyone's reference
        Fake(by_key["fedmf-dual+r30"], 0.1),
        Fake(by_key["fedmf-dual+plgc-r30"], 0.3),
        Fake(by_key["fedmf-dual+plgc-nocontrast-r30"], 0.2),
    ]
    lines = paired(fakes, plgc_ablation_against)  # type: ignore[arg-type]
    rows = [line for line in lines if line.startswith("| ML-100K |")]
    assert [row.split(" | ")[1:4] for row in rows] == [
        ["fedmf-dual+plgc-r30", "fedmf-dual+r30", "+20.00"],
        ["fedmf-dual+plgc-nocontrast-r30", "fedmf-dual+plgc-r30", "-10.00"],
    ]
    unset = [line for line in paired(fakes) if line.startswith("| ML-100K |")]
    assert all(" | pfedrec+r30 | " in line for line in unset)  # against the best row
