"""The scale harness's pure parts (fedrec_lab/scaling): cases, round figures, records, the table,
and the RSS sampling of a process tree. No run, no timing."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedrec_lab.scaling import phases, record, rss

ROUNDS_CSV = (
    "round,seconds,train-users,bytes-down,bytes-up\n"
    "1,2.0,10,100,50\n"
    "2,3.0,10,120,60\n"
    "3,5.0,8,120,64\n"
    "4,6.5,10,140,60\n"
)


def test_parse_case_splits_harness_and_run_config_keys() -> None:
    harness, config = record.parse_case(
        "preset=pfedrec-ml100k-strict,mode=flwr,nodes=2,workers=2,fraction-train=0.1,"
        "eval-users=1000,device=cuda,ncf-layers='32,16',plgc=true"
    )
    assert harness == {"preset": "pfedrec-ml100k-strict", "mode": "flwr", "nodes": 2, "workers": 2}
    assert config == {
        "fraction-train": 0.1,
        "eval-users": 1000,
        "device": "cuda",
        "ncf-layers": "32,16",
        "plgc": True,
    }


def test_parse_case_synthetic_aliases_and_default_mode() -> None:
    harness, config = record.parse_case("users=6040,items=3706,degree=165")
    assert harness == {"mode": "inprocess"}
    assert config == {
        "synthetic-users": 6040,
        "synthetic-items": 3706,
        "synthetic-mean-degree": 165,
        "dataset": "synthetic",
    }


@pytest.mark.parametrize("case", ["mode=gpu", "nodes"])
def test_parse_case_refuses(case: str) -> None:
    with pytest.raises(SystemExit):
        record.parse_case(case)


def test_run_figures_skip_the_first_round(tmp_path: Path) -> None:
    (tmp_path / "rounds.csv").write_text(ROUNDS_CSV)
    figures = record.run_figures(record.round_rows(tmp_path))
    assert figures["rounds"] == 4
    # durations 2, 1, 2, 1.5: after the first round 1, 2, 1.5
    assert figures["seconds_per_round_median"] == 1.5
    assert (figures["seconds_per_round_min"], figures["seconds_per_round_max"]) == (1.0, 2.0)
    assert figures["train_users_per_round"] == 10
    assert figures["clients_per_second"] == pytest.approx(10 / 1.5, abs=1e-4)
    assert (figures["bytes_down"], figures["bytes_up"]) == (120, 60)


def test_floor_payload_faithful_and_packed() -> None:
    figures = {"train_users_per_round": 94, "bytes_down": 4 * 1037 * 1000, "bytes_up": 4 * 1037}
    faithful = record.floor_payload(figures, nodes=943, users=943, evaluates=True)
    assert faithful == {
        "train-messages": 94,
        "evaluate-messages": 943,
        "train-down-floats": 1000,
        "train-up-floats": 1,
        "evaluate-down-floats": 1000,
        "evaluate-up-floats": 1,
    }
    packed = record.floor_payload(figures, nodes=2, users=943, evaluates=False)
    assert packed["train-messages"] == 2 and packed["evaluate-messages"] == 0
    assert packed["train-down-floats"] == 1037 * 1000 // 2


def test_probed_payload_each_kind_its_median() -> None:
    sizes = {"train": [(400, 80), (800, 40), (1200, 120)], "evaluate": [(4000, 0)] * 2}
    assert record.probed_payload(sizes) == {
        "train-messages": 3,
        "train-down-floats": 200,
        "train-up-floats": 20,
        "evaluate-messages": 2,
        "evaluate-down-floats": 1000,
        "evaluate-up-floats": 0,
    }


def _record(**changes) -> dict:
    base = {
        "method": "pfedrec",
        "dataset": "ml-100k",
        "users": 943,
        "items": 1682,
        "nodes": 943,
        "ray_workers": 1,
        "device": "cuda:0",
        "fraction_train": 1.0,
        "eval_users": None,
        "mode": "faithful",
        "seconds_per_round_median": 2.0,
        "bytes_down": 2_000_000,
        "bytes_up": 1_000_000,
        "cost_ratio": 1.25,
    }
    return {**base, **changes}


def test_case_name() -> None:
    assert record.case_name(_record()) == "pfedrec-ml-100k-943x1682-faithful-n943-w1-cuda0"
    named = record.case_name(_record(fraction_train=0.1, eval_users=1000))
    assert named.endswith("-f0.1-e1000")


def test_write_record_fields_and_no_absolute_path(tmp_path: Path) -> None:
    rec = _record(name="a-case", case="mode=faithful")
    path = record.write_record(rec, tmp_path)
    written = json.loads(path.read_text())
    assert list(written)[: len(record.FIELDS)] == list(record.FIELDS)
    assert written["cost_ratio"] == 1.25 and written["gpu_name"] is None
    with pytest.raises(ValueError, match="absolute path"):
        record.write_record(_record(name="b", case="data-dir=/home/me/data"), tmp_path)


def test_table_regenerated_from_every_json(tmp_path: Path) -> None:
    record.write_record(_record(name="b-case"), tmp_path)
    record.write_record(_record(name="a-case", mode="inprocess", eval_users=100), tmp_path)
    text = record.write_table(tmp_path).read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| case | mode |")
    assert [row.split(" | ")[0] for row in rows[1:]] == ["| a-case", "| b-case"]
    cells = rows[2].split(" | ")
    assert "2.00" in cells and "1.00" in cells and "1.25" in cells  # MB down, MB up, ratio
    assert "all" in cells and " 100 " in rows[1]


def test_tree_rss_counts_descendants_and_tagged_processes() -> None:
    if rss.backend_name() == "getrusage":
        pytest.skip("no /proc and no psutil: only the getrusage fallback here")
    size = 64 * 2**20
    touch = f"b = bytearray({size}); b[::4096] = b'x' * len(b[::4096])"
    script = f"{touch}; import time; time.sleep(30)"
    tag = "test-scale-harness"
    env = {**os.environ, rss.TAG_ENV: tag}
    child = subprocess.Popen([sys.executable, "-c", script])
    tagged = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    try:
        time.sleep(1.5)
        alone = rss.tree_rss_bytes(include_self=False, exclude={child.pid})
        with_child = rss.tree_rss_bytes(include_self=False)
        with_tag = rss.tree_rss_bytes(include_self=False, tag=tag)
        assert with_child - alone >= size * 0.9
        assert with_tag >= with_child
        assert rss.tree_rss_bytes() > with_child  # this process too
    finally:
        for process in (child, tagged):
            process.kill()
            process.wait()


def test_peak_rss_keeps_the_largest_sample() -> None:
    values = iter([10, 50, 20] + [5] * 1000)
    with rss.PeakRss(sample=lambda: next(values) * 2**20, interval=0.01) as peak:
        time.sleep(0.1)
    assert peak.mb == 50 and peak.samples >= 3 and peak.backend == "custom"


def test_rusage_fallback_is_positive() -> None:
    assert rss.rusage_peak_bytes() > 0


def test_echo_floor_in_process(tmp_path: Path) -> None:
    from flwr.app import Context, RecordDict

    from fedrec_lab.local_grid import LocalGrid
    from fedrec_lab.scaling import echo

    config = {
        "num-server-rounds": 3,
        "nodes": 3,
        "train-messages": 2,
        "evaluate-messages": 3,
        "train-down-floats": 10,
        "train-up-floats": 5,
        "evaluate-down-floats": 20,
        "evaluate-up-floats": 5,
        "node-wait-timeout": 5.0,
        "results-dir": str(tmp_path),
    }
    grid = LocalGrid(echo.client, config, 3, keep_messages=True)
    context = Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=config)
    echo.main(grid, context)
    assert len(json.loads((tmp_path / "echo-rounds.json").read_text())["seconds"]) == 3
    assert len(grid.sent) == 3 * (2 + 3)
    assert {r.content["arrays"]["values"].numpy().size for r in grid.replies} == {5}


def test_in_process_path_imports_no_ray() -> None:
    code = (
        "import sys, fedrec_lab.scaling.runner, fedrec_lab.local_grid, fedrec_flwr.client_app, "
        "fedrec_flwr.server_app; sys.exit('ray' in sys.modules)"
    )
    project = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=project).returncode == 0


def test_floor_fields_one_or_bracketing_floors() -> None:
    payload = {"train-messages": 3}
    one = record.floor_fields([(2.0, 100.0)], 3.0, payload)
    assert one["floor_seconds_per_round_median"] == 2.0 and one["cost_ratio"] == 1.5
    assert "floor_runs_seconds_per_round_median" not in one
    two = record.floor_fields([(2.0, 100.0), (4.0, 120.0)], 3.0, payload)
    assert two["floor_seconds_per_round_median"] == 3.0 and two["cost_ratio"] == 1.0
    assert two["floor_runs_seconds_per_round_median"] == [2.0, 4.0]
    assert two["floor_peak_rss_mb"] == 120.0 and two["floor_payload"] == payload


@pytest.mark.parametrize(
    ("workers", "cores", "entries"),
    [
        (1, 2, ["client-resources-num-cpus=2"]),
        (2, 2, ["client-resources-num-cpus=1"]),
        (2, 16, ["client-resources-num-cpus=8"]),
        (4, 2, ["client-resources-num-cpus=1", "init-args-num-cpus=4"]),
        (3, 2, ["client-resources-num-cpus=1", "init-args-num-cpus=3"]),
    ],
)
def test_federation_starts_as_many_ray_workers_as_asked(workers, cores, entries) -> None:
    from fedrec_lab.scaling.runner import federation

    assert federation({"workers": workers}, cpu_count=cores) == entries
    assert federation({"workers": workers, "gpus": 0.5}, cpu_count=cores)[-1] == (
        "client-resources-num-gpus=0.5"
    )


class FakeTime:
    """A clock that moves only when told (wall and CPU seconds alike)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def process_time(self) -> float:
        return self.now


def test_phase_clock_charges_each_phase_its_own_seconds(monkeypatch) -> None:
    """A phase's seconds leave out those of the phases inside it; a wrapped function is a
    phase; seconds before a round's first call belong to the round before."""
    fake = FakeTime()
    monkeypatch.setattr(phases, "time", fake)
    clock = phases.PhaseClock()
    owner = type("Owner", (), {"step": staticmethod(lambda: setattr(fake, "now", fake.now + 2))})
    clock.wrap(owner, "step", "inner")
    clock.enter_round(1)
    with clock.phase("outer"):
        fake.now += 1
        owner.step()
        fake.now += 3
    with clock.phase("outer"):
        clock.enter_round(2)
        fake.now += 5
    assert clock.wall[1] == {"outer": 4.0, "inner": 2.0} and clock.cpu[1] == clock.wall[1]
    assert clock.wall[2] == {"outer": 5.0} and clock.round_starts == {1: (0.0, 0.0), 2: (6.0, 6.0)}


def test_phase_clock_records_kernel_seconds_and_page_faults_at_each_round() -> None:
    """Each round's start keeps the process's kernel seconds and minor page faults so far:
    memory first touched in a round shows as that round's faults."""
    clock = phases.PhaseClock()
    clock.enter_round(1)
    with mmap.mmap(-1, 1 << 24) as fresh:  # anonymous pages the process never touched
        fresh.write(b"\x01" * len(fresh))  # written: faulted in
    clock.enter_round(2)
    assert set(clock.round_usage) == {1, 2}
    (seconds_1, faults_1), (seconds_2, faults_2) = clock.round_usage[1], clock.round_usage[2]
    assert seconds_2 >= seconds_1 and faults_2 > faults_1


def test_the_node_phases_name_what_the_node_calls() -> None:
    """Each phase the profile times is a function or method of the node under that name."""
    for module, attribute, _ in phases.NODE_PHASES:
        owner, name = phases.phase_target(module, attribute)
        assert callable(getattr(owner, name, None)), f"{module}.{attribute}"
