"""``fedrec analyze``: replays reproduce their run, the sharpness measures are right on losses
whose answers are known, the analyses read the model evaluation used."""

import csv
import json

import numpy as np
import pytest
import torch

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.server_app import run_federation
from fedrec_lab import stats
from fedrec_lab.analysis import item_views, landscape
from fedrec_lab.analysis.sharpness import LocalLoss, rho_sharpness, sample_users, top_eigen
from fedrec_lab.analysis.state import (
    has_state,
    load_best_state,
    replay,
    replay_difference,
    run_config,
)
from fedrec_lab.local_grid import LocalGrid

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 24,
    "synthetic-items": 300,
    "synthetic-mean-degree": 12,
    "num-server-rounds": 4,
    "batch-size": 32,
    "item-lr": 0.5,
}

pytestmark = pytest.mark.usefixtures("private_cache")


def run(folder, **overrides):
    config = {**SMALL, "results-dir": str(folder), "run-name": "run", **overrides}
    run_federation(LocalGrid(client_app, config, num_nodes=2), RunConfig.from_mapping(config))
    return folder / "run"


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------- the measures, known answers
def quadratic(matrix: np.ndarray, groups: list[str]) -> LocalLoss:
    a = torch.from_numpy(matrix)

    def fn(theta):
        x = torch.cat([t.reshape(-1) for t in theta])
        return 0.5 * x @ a @ x + x.sum()

    theta = [torch.zeros(1, dtype=torch.float64) for _ in groups]
    return LocalLoss([f"p{i}" for i in range(len(groups))], groups, theta, fn)


def test_power_iteration_finds_the_top_eigenvalue():
    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    matrix = basis @ np.diag([4.0, 1.0, 0.5, 0.2, 0.1]) @ basis.T
    value, vector, runs = top_eigen(quadratic(matrix, ["shared"] * 5), rng, iterations=200)
    assert 1 < runs <= 200
    assert value == pytest.approx(4.0, rel=1e-3)
    found = torch.cat([v.reshape(-1) for v in vector]).numpy()
    assert abs(found @ basis[:, 0]) == pytest.approx(1.0, abs=1e-3)


def test_rho_sharpness_is_the_ascent_on_each_groups_sphere():
    """L = 0.5 x'x + sum(x) at 0, radii per group: SAM's point rho g/|g| per group raises
    the loss by rho |g| + rho^2 / 2 in each; a group with radius 0 does not move."""
    loss = quadratic(np.eye(4), ["private", "private", "shared", "shared"])
    worst, first = rho_sharpness(loss, {"private": 0.1, "shared": 0.0}, steps=3)
    expected = 0.1 * np.sqrt(2) + 0.5 * 0.01
    assert first == pytest.approx(expected)
    assert worst == pytest.approx(expected)  # the gradient stays aligned: no higher point
    both, _ = rho_sharpness(loss, {"private": 0.1, "shared": 0.2}, steps=1)
    assert both == pytest.approx(expected + 0.2 * np.sqrt(2) + 0.5 * 0.04)


def test_sampled_users_do_not_depend_on_the_run():
    assert np.array_equal(sample_users(100, 8), sample_users(100, 8))
    assert len(set(sample_users(100, 8))) == 8 and len(sample_users(5, 8)) == 5


# --------------------------------------------------------------------- runs and their states
@pytest.mark.parametrize("protocol", ["paper", "strict"])
def test_a_replay_reproduces_the_runs_best_round(tmp_path, protocol):
    original = run(tmp_path / "runs", protocol=protocol)
    folder = replay(original, tmp_path / "work")
    assert has_state(folder)
    check = replay_difference(original, folder)
    assert check["metrics_equal"] and check["max_abs"] == 0.0
    best = json.loads((original / "summary.json").read_text())["best_round"]
    assert len(rows(folder / "rounds.csv")) == best  # it stops at the best round
    assert replay(original, tmp_path / "work") == folder  # reused, not run again


@pytest.mark.parametrize("gpu", [False, True])
def test_a_cuda_run_is_read_on_the_cpu_where_no_gpu_is_seen(tmp_path, monkeypatch, gpu):
    (tmp_path / "config.json").write_text(json.dumps({"method": "fedmf", "device": "cuda:1"}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert run_config(tmp_path)["device"] == ("cuda:1" if gpu else "cpu")
    assert run_config(tmp_path, device="cuda")["device"] == "cuda"  # an explicit change wins


def test_the_gap_of_the_analysis_is_the_runs(tmp_path):
    folder = run(tmp_path / "runs", **{"keep-best-state": True, "eval-loss": True})
    best = load_best_state(folder)
    record = landscape.analyze(best, {"private": 0.05, "shared": 0.05}, users=3, iterations=5)
    (at_best,) = [r for r in rows(folder / "rounds.csv") if int(r["round"]) == best.round]
    assert record["gap"] == pytest.approx(float(at_best["gap"]), rel=1e-9)
    assert record["fit_loss"] == pytest.approx(float(at_best["fit-loss"]), rel=1e-9)
    assert len(record["sampled"]) == 3 and record["mean_lambda_max"] > 0
    assert all(m["rho_sharpness"] >= m["rho_sharpness_first_step"] for m in record["sampled"])
    landscape.write(record, tmp_path / "out")
    assert (tmp_path / "out" / "run.png").exists()


def test_a_run_without_sam_needs_radii(tmp_path):
    folder = run(tmp_path / "runs", **{"keep-best-state": True})
    with pytest.raises(ValueError, match="trains without SAM"):
        landscape.analyze(load_best_state(folder), None, users=1)


@pytest.mark.parametrize("method", ["pfedrec", "fedrap"])
def test_item_views_own_is_the_runs_evaluation(tmp_path, method):
    folder = run(
        tmp_path / "runs",
        method=method,
        protocol="paper",
        **{"keep-best-state": True, "eval-loss": True},
    )
    summary = json.loads((folder / "summary.json").read_text())
    record = item_views.analyze(load_best_state(folder), summary)
    assert record["own_equals_run"]
    views = record["views"]
    assert views["global"] != views["own"] and views["random"] != views["own"]


def test_item_views_refuse_a_paper_state_without_every_tuned_row(tmp_path):
    folder = run(tmp_path / "runs", protocol="paper", **{"keep-best-state": True})
    with pytest.raises(ValueError, match="random view needs every tuned row"):
        item_views.analyze(load_best_state(folder), {})


def test_derangement_has_no_fixed_point():
    pi = item_views.derangement(3, 50)
    assert sorted(pi) == list(range(50)) and not np.any(pi == np.arange(50))


def test_users_averaged_over_seeds_for_the_paired_interval():
    users, values = stats.seed_averaged(
        [(np.array([1, 2, 3]), np.array([1.0, 2.0, 3.0])), (np.array([3, 2]), [5.0, 4.0])]
    )
    assert users.tolist() == [2, 3] and values.tolist() == [3.0, 4.0]


# ------------------------------------------------------------------------- reports over runs
def fake_run(runs, name, columns, summary, device="cpu"):
    folder = runs / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"run-name": name, "device": device}))
    header = list(columns)
    lines = [",".join(header)]
    for i in range(len(columns[header[0]])):
        lines.append(",".join(str(columns[c][i]) for c in header))
    (folder / "rounds.csv").write_text("\n".join(lines) + "\n")
    (folder / "summary.json").write_text(json.dumps(summary))


def test_fedrap_report_reads_density_bytes_and_divergence(tmp_path):
    from fedrec_lab.analysis import fedrap

    runs = tmp_path / "runs"
    summary = {"rounds": 3, "best_round": 2, "val": {"hr@10": 0.5}, "test": {"hr@10": 0.4}}
    for seed in (0, 1, 2):
        fake_run(
            runs,
            f"fedrap-ml100k-paper-seed{seed}",
            {
                "round": [1, 2, 3],
                "c-density": [1.0, 0.9, 0.8],
                "bytes-up": [90, 90, 90],
                "bytes-down": [80, 80, 80],
                "train-loss": [0.5, 0.4, 0.3],
                "val-hr@10": [0.4, 0.5, 0.45],
            },
            summary,
        )
        fake_run(
            runs,
            f"pfedrec-ml100k-paper-seed{seed}",
            {
                "round": [1, 2, 3],
                "c-density": [1, 1, 1],
                "bytes-up": [100, 100, 100],
                "bytes-down": [100, 100, 100],
            },
            summary,
        )
        fake_run(
            runs,
            f"fedrap+squared-ml100k-paper-seed{seed}",
            {"round": [1, 2, 3], "train-loss": [0.5, 9.0, ""], "val-hr@10": [0.4, 0.1, ""]},
            {**summary, "best_round": 1, "diverged_round": 3},
        )
    (row,) = fedrap.traffic(runs)
    assert row["density"][1] == 1.0 and row["saved"] == pytest.approx(0.1)
    assert row["mb_down_fedrap"] == pytest.approx(80e-6)
    rows_ = fedrap.divergence(runs)
    squared = [r for r in rows_ if "squared" in r["distance"]]
    assert len(squared) == 3 and squared[0]["diverged_round"] == 3
    assert squared[0]["loss"] == [0.5, 9.0, None]
    text = fedrap.markdown([row], rows_, "cmd")
    assert (
        "| ml-100k | paper | 3 | 1.000 | - | - | - |" in text
        and "0.5000 / - / - / - | 9.0000 | 3 |" in text
    )


def test_the_sweep_varies_one_radius_and_keeps_the_presets_point_once():
    from fedrec_lab.analysis import sweep

    for protocol in sweep.SCHEDULE:
        radii = sweep.preset_radii(protocol)
        found = sweep.rows(protocol)
        points = [
            (
                dict(r.overrides).get("sam-rho-private", radii["rp"]),
                dict(r.overrides).get("sam-rho-shared", radii["rs"]),
            )
            for r in found
        ]
        assert len(points) == len(set(points))  # no point twice
        assert points[0] == (radii["rp"], radii["rs"]) and found[0].tag == "sweep"
        for row in found[1:]:
            overrides = dict(row.overrides)
            assert overrides["num-server-rounds"] == sweep.SCHEDULE[protocol]["num-server-rounds"]
            varied = "sam-rho-private" if row.tag.startswith("rp") else "sam-rho-shared"
            assert overrides[varied] in sweep.GRID


def test_the_sweep_runs_only_the_missing_cells_of_the_rows_asked_for(tmp_path, monkeypatch):
    from fedrec_lab.analysis import sweep
    from fedrec_lab.experiments import cells as runner

    ran: list[str] = []

    def fake_run(config, nodes, use_flwr):
        ran.append(config["run-name"])
        folder = tmp_path / config["run-name"]
        folder.mkdir()
        (folder / "summary.json").write_text("{}")
        return "finished:completed"

    monkeypatch.setattr(runner, "run_federated", fake_run)
    done = tmp_path / "fedrecgel+rp0-ml100k-strict-seed0"  # a finished cell: kept
    done.mkdir()
    (done / "summary.json").write_text("{}")
    sweep.run_missing(tmp_path, str(tmp_path), protocols=("strict",), seeds=(0, 1), tags=("rp0",))
    assert ran == ["fedrecgel+rp0-ml100k-strict-seed1"]
    with pytest.raises(SystemExit, match="--rows: rp7 is not a row of the sweep"):
        sweep.run_missing(tmp_path, str(tmp_path), protocols=("strict",), tags=("rp7",))
    assert ran == ["fedrecgel+rp0-ml100k-strict-seed1"]


def test_the_sweeps_commands_name_their_rows_only_when_some_are_not_measured():
    from fedrec_lab.analysis.sweep import measured_flags

    def point(protocol, tag, seeds):
        return {"protocol": protocol, "tag": tag, "seeds": len(seeds), "seed_list": seeds}

    paper = [point("paper", "sweep", [0, 1, 2]), point("paper", "rp0", [0, 1, 2])]
    strict = [point("strict", "sweep", [0, 1, 2]), point("strict", "rp0", [])]
    assert measured_flags(paper) == [" --protocols paper --seeds 0 1 2"]
    assert measured_flags(paper + strict) == [
        " --protocols paper --seeds 0 1 2",
        " --protocols strict --seeds 0 1 2 --rows sweep",
    ]
    assert measured_flags([point("strict", "sweep", [])]) == []


def test_figure3_rows_pair_the_views_over_seeds(tmp_path, monkeypatch):
    records = tmp_path / "item-views"
    records.mkdir()
    monkeypatch.setattr(item_views, "SEEDS", (0, 1))
    for seed in (0, 1):
        record = {
            "own_equals_run": True,
            "views": {
                v: {"test-hr@10": h, "test-ndcg@10": h / 2}
                for v, h in (("own", 0.5), ("global", 0.4), ("random", 0.1))
            },
            "users": [0, 1, 2, 3],
            "per_user_test_hr": {
                "own": [1, 1, 0, 0],
                "global": [1, 0, 0, 0],
                "random": [0, 0, 0, 0],
            },
        }
        (records / f"pfedrec-ml100k-paper-seed{seed}.json").write_text(json.dumps(record))
    (row,) = item_views.figure3_rows(records)
    assert row["seeds"] == [0, 1] and row["own hr@10"] == [50.0, 50.0]
    assert row["own - global"]["mean"] == pytest.approx(25.0)
    assert row["own - random"]["mean"] == pytest.approx(50.0)
    assert "| pfedrec | ml-100k | paper | 0, 1 | 50.00 ± 0.00 |" in item_views.figure3_markdown(
        [row], "cmd"
    )


def one_user_record(radii: list[float]) -> dict:
    """A SAM-table record of one user (user 0) with the radii ``radii``."""
    sampled = [{"user": 0, "lambda_max": 1.0, "rho_sharpness": 0.1}]
    record = {"gap": 0.1, "users": [0], "user_gap": [0.1], "mean_lambda_max": 1.0}
    return record | {"mean_rho_sharpness": 0.1, "sampled": sampled, "radii": radii}


def test_a_sam_row_not_measured_names_the_cells_it_already_has(tmp_path):
    from fedrec_lab.analysis import sam_table
    from fedrec_lab.analysis.cells import SamCell

    runs, records = tmp_path / "runs", tmp_path / "records"
    records.mkdir(parents=True)
    cell = SamCell("FedRecGEL", False, "lastfm-2k", "strict", 0)
    fake_run(
        runs, cell.name, {"round": [1]}, {"rounds": 1, "best_round": 1, "test": {"hr@10": 0.1}}
    )
    record = one_user_record([0.3, 0.01])
    (records / f"{cell.name}.json").write_text(json.dumps(record))
    # a record whose run is not here is no cell of the row
    twin = SamCell("FedRecGEL", True, "lastfm-2k", "strict", 1)
    (records / f"{twin.name}.json").write_text(json.dumps(record))
    rows_ = sam_table.table_rows(runs, records)
    (gel,) = [r for r in rows_ if r["recorded"]]
    assert gel["seeds"] == [] and gel["recorded"] == [{"side": "without", "seed": 0}]
    text = sam_table.markdown(rows_, "cmd")
    assert "Not measured (20 of 20 rows)" in text
    assert "FedRecGEL Last.fm-2K strict (cells recorded: without SAM seed 0);" in text
    assert "FedRecGEL Last.fm-2K paper;" in text


def test_sam_table_pairs_seeds_lists_them_and_says_what_is_missing(tmp_path):
    from fedrec_lab.analysis import sam_plot, sam_table
    from fedrec_lab.analysis.cells import SamCell

    runs, records = tmp_path / "runs", tmp_path / "records"
    records.mkdir(parents=True)
    users = [0, 1, 2, 3]
    for seed, best in ((0, 7), (1, 9)):
        for sam in (False, True):
            cell = SamCell("PFedRec", sam, "ml-100k", "strict", seed)
            hr = [1, 1, 1, 1] if sam else [1, 0, 0, 0]
            eig = 0.5 if sam else 2.0
            fake_run(
                runs,
                cell.name,
                {"round": [1, 2], "gap": [0.2, 0.1] if sam else [0.3, 0.2]},
                {"rounds": 10, "best_round": best + sam, "test": {"hr@10": sum(hr) / 4}},
            )
            lines = ["user,test-hr@10", *(f"{u},{h}" for u, h in zip(users, hr, strict=True))]
            without_file = seed == 1 and sam  # its users' HR@10 are in its record (a replay's)
            if not without_file:
                (runs / cell.name / "per-user.csv").write_text("\n".join(lines) + "\n")
            record = {
                "gap": 0.1 if sam else 0.2,
                "users": users,
                "user_gap": [0.1 if sam else 0.2] * 4,
                "mean_lambda_max": eig,
                "mean_rho_sharpness": eig / 10,
                "sampled": [
                    {"user": u, "lambda_max": eig + u / 10, "rho_sharpness": eig / 10}
                    for u in users
                ],
                "radii": [0.5, 0.05],
                "replay": None if sam else {"metrics_equal": True, "max_abs": 0.0},
            }
            if without_file:
                record["user_test_hr"] = {"users": users, "test-hr@10": hr}
            (records / f"{cell.name}.json").write_text(json.dumps(record))
    # seed 2 of the pair has only its run without SAM: the row holds seeds 0 and 1
    (records / f"{SamCell('PFedRec', False, 'ml-100k', 'strict', 2).name}.json").write_text("{}")
    rows_ = sam_table.table_rows(runs, records)
    (done,) = [r for r in rows_ if r["seeds"]]
    assert done["seeds"] == [0, 1] and done["best_rounds"] == {"without": [7, 9], "with": [8, 10]}
    assert done["hr@10"]["difference"]["mean"] == pytest.approx(75.0)
    assert done["mean_lambda_max"]["difference"]["mean"] == pytest.approx(-1.5)
    text = sam_table.markdown(rows_, "cmd")
    assert "| PFedRec | ML-100K | strict | 0, 1 | 10; best 7, 9 / 8, 10 | 0.5 / 0.05 |" in text
    assert "flatter minima here in 1 of 1 measured rows" in text
    assert "test HR@10 with SAM is higher beyond the interval in 1, lower in 0" in text
    assert "2 kept by their run" in text and "2 of 2 replays" in text
    assert "Not measured (19 of 20 rows)" in text and "FedRAP Last.fm-2K paper" in text
    assert "--methods PFedRec --datasets ml-100k --protocols strict --seeds 0 1" in text
    assert done["early_best"] == [] and "†" not in text
    assert done["hr_from_replays"] == [] and "from replays" not in text
    # a SAM run whose best round is its first of 10 (the first tenth): flagged in the row,
    # under the table and in the verdict, from its summary alone
    summary_file = runs / SamCell("PFedRec", True, "ml-100k", "strict", 1).name / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary_file.write_text(json.dumps({**summary, "best_round": 1}))
    (early,) = [r for r in sam_table.table_rows(runs, records) if r["seeds"]]
    assert early["early_best"] == [{"side": "with", "seed": 1, "round": 1}]
    text = sam_table.markdown([early], "cmd")
    assert "| 10; best 7, 9 / 8, 1† |" in text
    assert "(1 of 1 rows: PFedRec ML-100K strict (with SAM, seed 1: round 1))" in text
    assert "whose best round is early (†): 1 of 1." in text
    summary_file.write_text(json.dumps({**summary, "best_round": 2}))
    (late,) = [r for r in sam_table.table_rows(runs, records) if r["seeds"]]
    assert late["early_best"] == [] and late["best_rounds"]["with"] == [8, 2]
    # its users' HR@10 from a replay with the run's test HR@10 only: the table says so
    taken_file = records / f"{SamCell('PFedRec', True, 'ml-100k', 'strict', 1).name}.json"
    taken = json.loads(taken_file.read_text())
    taken["user_test_hr"]["equal"] = "test-hr@10"
    taken_file.write_text(json.dumps(taken))
    (noted,) = [r for r in sam_table.table_rows(runs, records) if r["seeds"]]
    assert noted["hr_from_replays"] == [{"side": "with", "seed": 1}]
    text = sam_table.markdown([noted], "cmd")
    assert "from replays: PFedRec ML-100K strict (with SAM seed 1)." in text
    sam_plot.plot(rows_, runs, tmp_path / "sam-table.png")
    assert (tmp_path / "sam-table.png").stat().st_size > 0
    # a run with neither a per-user file nor its users' HR@10 in its record: no HR@10 interval
    name = SamCell("PFedRec", True, "ml-100k", "strict", 1).name
    record = json.loads((records / f"{name}.json").read_text())
    del record["user_test_hr"]
    (records / f"{name}.json").write_text(json.dumps(record))
    (done,) = [r for r in sam_table.table_rows(runs, records) if r["seeds"]]
    assert "difference" not in done["hr@10"] and done["hr@10"]["with"] == [1.0, 1.0]
    assert done["mean_lambda_max"]["difference"]["mean"] == pytest.approx(-1.5)
    (tmp_path / "sam-table.png").unlink()
    sam_plot.plot([done], runs, tmp_path / "sam-table.png")  # that panel shows a gap
    assert (tmp_path / "sam-table.png").stat().st_size > 0


def test_the_sam_table_names_each_sides_devices_and_the_pairs_that_mix_them(tmp_path):
    from fedrec_lab.analysis import sam_table
    from fedrec_lab.analysis.cells import SamCell

    runs, records = tmp_path / "runs", tmp_path / "records"
    records.mkdir(parents=True)
    record = one_user_record([0.3, 0.01])
    # seed 0: both on the CPU; seed 1: with SAM on cuda:0 (read as cuda); seed 2: a config
    # without the key (made before it: the default, cpu)
    for seed, device in ((0, "cpu"), (1, "cuda:0"), (2, None)):
        for sam in (False, True):
            cell = SamCell("FedRecGEL", sam, "lastfm-2k", "strict", seed)
            summary = {"rounds": 10, "best_round": 9, "test": {"hr@10": 0.1}}
            fake_run(runs, cell.name, {"round": [1]}, summary, device if sam else "cpu")
            if device is None:
                (runs / cell.name / "config.json").write_text("{}")
            (records / f"{cell.name}.json").write_text(json.dumps(record))
    (done,) = [r for r in sam_table.table_rows(runs, records) if r["seeds"]]
    assert done["devices"] == {"without": ["cpu"] * 3, "with": ["cpu", "cuda", "cpu"]}
    assert done["mixed_devices"] == [{"seed": 1, "without": "cpu", "with": "cuda"}]
    text = sam_table.markdown([done], "cmd")
    assert "| 0.3 / 0.01 | cpu / cpu, cuda, cpu |" in text
    assert (
        "1 of 1 rows pair runs trained on different devices: FedRecGEL Last.fm-2K strict "
        "(seed 1: without SAM on cpu, with SAM on cuda)."
    ) in text
    # every pair on one device: one name per side, and the note says so
    with_one = SamCell("FedRecGEL", True, "lastfm-2k", "strict", 1).name
    (runs / with_one / "config.json").write_text(json.dumps({"device": "cpu"}))
    (same,) = [r for r in sam_table.table_rows(runs, records) if r["seeds"]]
    assert same["mixed_devices"] == []
    text = sam_table.markdown([same], "cmd")
    assert "| 0.3 / 0.01 | cpu / cpu |" in text
    assert "each pair's two runs were trained on the same device" in text
    assert "different devices" not in text
    # a run folder without its configuration: the table says what is missing
    (runs / with_one / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"config\.json: missing"):
        sam_table.table_rows(runs, records)


def test_a_seed_whose_run_had_a_reply_left_out_is_left_out_and_named(tmp_path):
    from fedrec_lab.analysis import sam_table
    from fedrec_lab.analysis.cells import SamCell

    runs, records = tmp_path / "runs", tmp_path / "records"
    records.mkdir(parents=True)
    record = one_user_record([0.01, 0.01])
    for seed in (0, 1, 2):
        for sam in (False, True):
            cell = SamCell("FedNCF", sam, "lastfm-2k", "paper", seed)
            # seed 1 with SAM: a node's reply rejected from round 2 on
            rejected = [0, 1, 2] if (seed, sam) == (1, True) else [0, 0, 0]
            columns = {"round": [1, 2, 3], "rejected-replies": rejected}
            summary = {"rounds": 3, "best_round": 3, "test": {"hr@10": 0.5}}
            fake_run(runs, cell.name, columns, summary)
            (records / f"{cell.name}.json").write_text(json.dumps(record))
    (row,) = [r for r in sam_table.table_rows(runs, records) if r["seeds"]]
    assert row["seeds"] == [0, 2]
    assert row["left_out"] == [{"side": "with", "seed": 1, "round": 2}]
    text = sam_table.markdown([row], "cmd")
    assert "| FedNCF | Last.fm-2K | paper | 0, 2 |" in text
    assert (
        "a node's reply left out: FedNCF Last.fm-2K paper (seed 1 with SAM (from round 2))" in text
    )
    assert "--protocols paper --seeds 0 1 2" in text  # the command makes every seed's records
    # the next seed's records: it takes the place of the seed left out (no further seed)
    for sam in (False, True):
        cell = SamCell("FedNCF", sam, "lastfm-2k", "paper", 3)
        summary = {"rounds": 3, "best_round": 2, "test": {"hr@10": 0.5}}
        fake_run(runs, cell.name, {"round": [1, 2, 3], "rejected-replies": [0, 0, 0]}, summary)
        (records / f"{cell.name}.json").write_text(json.dumps(record))
    (row,) = [r for r in sam_table.table_rows(runs, records) if r["seeds"]]
    assert row["seeds"] == [0, 2, 3] and row["best_rounds"]["with"] == [3, 3, 2]
    assert "| FedNCF | Last.fm-2K | paper | 0, 2, 3 |" in sam_table.markdown([row], "cmd")
    assert "--protocols paper --seeds 0 1 2 3" in sam_table.markdown([row], "cmd")
    # no rejection anywhere: every seed paired, no note
    without = SamCell("FedNCF", True, "lastfm-2k", "paper", 1).name
    (runs / without / "rounds.csv").write_text("round,rejected-replies\n1,0\n")
    (row,) = [r for r in sam_table.table_rows(runs, records) if r["seeds"]]
    assert row["seeds"] == [0, 1, 2] and row["left_out"] == []  # seed 3 not needed
    assert "reply left out" not in sam_table.markdown([row], "cmd")
    # a node's evaluation that failed leaves its run out too (the runtime's partial rounds)
    (runs / without / "rounds.csv").write_text("round,rejected-replies,eval-failures\n1,0,1\n")
    (row,) = [r for r in sam_table.table_rows(runs, records) if r["seeds"]]
    assert row["seeds"] == [0, 2, 3]
    assert row["left_out"] == [{"side": "with", "seed": 1, "round": 1}]


def test_a_record_takes_its_users_hr_only_from_a_replay_with_the_runs_test_hr(tmp_path):
    from fedrec_lab.analysis import sam_table
    from fedrec_lab.analysis.command import _take_user_hr

    run, replayed = tmp_path / "run", tmp_path / "replay"
    run.mkdir()
    replayed.mkdir()
    (run / "summary.json").write_text(json.dumps({"best_round": 2}))
    head = "round,test-hr@10,test-ndcg@10\n"
    (run / "rounds.csv").write_text(head + "1,0.25,0.1\n2,0.5,0.3\n")
    (replayed / "rounds.csv").write_text(head + "2,0.4,0.3\n")
    (replayed / "per-user.csv").write_text("user,test-hr@10\n3,1.0\n5,0.0\n")
    record: dict = {"replay": {"metrics_equal": False}}
    _take_user_hr(record, run, replayed)  # its test HR@10 is not the run's
    assert "user_test_hr" not in record
    (replayed / "rounds.csv").write_text(head + "2,0.5,0.30001\n")
    _take_user_hr(record, run, replayed)  # the run's test HR@10, NDCG@10 in the last digits
    assert record["user_test_hr"]["equal"] == "test-hr@10"
    assert sam_table.replay_hr_only(run, record)
    del record["user_test_hr"]
    record["replay"] = {"metrics_equal": True}
    _take_user_hr(record, run, replayed)
    assert record["user_test_hr"] == {
        "users": [3, 5],
        "test-hr@10": [1.0, 0.0],
        "equal": "metrics",
    }
    assert not sam_table.replay_hr_only(run, record)
    (run / "per-user.csv").write_text("user,test-hr@10\n3,1.0\n5,0.0\n")
    del record["user_test_hr"]
    _take_user_hr(record, run, replayed)  # the run's own file is read by the table
    assert "user_test_hr" not in record


@pytest.mark.parametrize("resumes", [True, False])
def test_an_unfinished_sam_cell_continues_from_its_checkpoint_else_runs_again(
    tmp_path, monkeypatch, resumes
):
    from fedrec_lab.analysis import cells as sam_cells
    from fedrec_lab.experiments import cells as runner

    cell = sam_cells.SamCell("FedMF", True, "ml-100k", "strict", 0)
    runs = tmp_path / "runs"
    folder = runs / cell.name
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "INCOMPLETE").write_text("")
    (folder / "config.json").write_text("{}")
    (folder / "checkpoint" / "latest.json").write_text(json.dumps({"round": 60}))
    started = []

    def run_federated(config, nodes, use_flwr):
        started.append(config.get("resume", ""))
        if config.get("resume") and not resumes:
            return "failed: the checkpoint's configuration differs"
        (runs / cell.name).mkdir(exist_ok=True)
        (runs / cell.name / "config.json").write_text(json.dumps(config))
        return "finished:completed"

    monkeypatch.setattr(runner, "run_federated", run_federated)
    found, how = sam_cells.ensure_state(cell, runs, tmp_path / "work", tmp_path)
    assert found == folder
    if resumes:
        assert how == "continued" and started == [str(folder.resolve())]
    else:  # set aside, kept, and run from round 1
        assert how == "run" and started == [str(folder.resolve()), ""]
        assert len(list(runs.glob(f"{cell.name}.incomplete-*"))) == 1


@pytest.mark.slow  # five end-to-end lab runs of 2 rounds: the slow tier
def test_a_tiny_radius_sweep_runs_its_missing_cells_and_reports_them(tmp_path, monkeypatch):
    from fedrec_lab.analysis import sweep
    from fedrec_lab.analysis.command import main

    tiny = {"num-server-rounds": 2, "synthetic-users": 30, "synthetic-items": 400}
    monkeypatch.setattr(sweep, "DATASET", "synthetic")
    monkeypatch.setattr(sweep, "SCHEDULE", {"strict": tiny, "paper": tiny})
    monkeypatch.setattr(sweep, "GRID", (0.0, 1.0))
    runs, out = tmp_path / "runs", tmp_path / "out"
    argv = ["radius-sweep", "--data-dir", str(tmp_path), "--runs", str(runs), "--out", str(out)]
    assert main([*argv, "--protocols", "strict", "--seeds", "0"]) == 0
    found = json.loads((out / "fedrecgel-radius-sweep.json").read_text())
    strict = [p for p in found if p["protocol"] == "strict"]
    assert len(strict) == len(sweep.rows("strict")) and all(p["seeds"] == 1 for p in strict)
    assert all(p["seeds"] == 0 for p in found if p["protocol"] == "paper")  # not asked for
    report = (out / "fedrecgel-radius-sweep.md").read_text()
    rows_each = len(sweep.rows("strict"))
    assert f"Measured: strict: {rows_each} of {rows_each} rows, seed 0; paper: 0 of" in report
    assert "A reduced sweep" in report
    assert f"--out {out} --protocols strict --seeds 0\n" in report
    for point in strict:  # each run at its row's radii
        name = f"fedrecgel+{point['tag']}-synthetic-strict-seed0"
        config = json.loads((runs / name / "config.json").read_text())
        assert (config["sam-rho-private"], config["sam-rho-shared"]) == (
            point["private"],
            point["shared"],
        )
    assert (out / "fedrecgel-radius-sweep.png").stat().st_size > 0
    with pytest.raises(SystemExit, match="--protocols: other"):
        main([*argv, "--protocols", "other"])
