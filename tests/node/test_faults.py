"""Fault injection (``fault-fraction``, ``fault-mode``): keyed per (seed, round, node),
reported per round in ``rounds.csv``; a run with failing nodes completes."""

from __future__ import annotations

import pytest
from server.test_replies import SMALL, read_rounds, without_seconds

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.node.faults import (
    TIMEOUT_OVERSHOOT,
    InjectedFault,
    failing_partitions,
    inject_fault,
)
from fedrec_flwr.partition import users_of_partition
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid

pytestmark = pytest.mark.usefixtures("private_cache")


def test_node_fails_is_keyed_and_has_the_configured_rate():
    config = RunConfig.from_mapping({"fault-fraction": 0.2, "seed": 3})
    draws = [failing_partitions(config, r, range(1000)) for r in (1, 2)]
    assert draws[0] == failing_partitions(config, 1, range(1000))  # keyed, reproducible
    assert draws[0] != draws[1]  # a fresh draw each round
    assert all(150 < len(d) < 250 for d in draws)
    assert failing_partitions(config.replace(fault_fraction=0.0), 1, range(1000)) == []


def test_inject_fault_modes():
    config = RunConfig.from_mapping({"fault-fraction": 0.5, "round-timeout": 2.0})
    failing = failing_partitions(config, 1, range(20))
    healthy = sorted(set(range(20)) - set(failing))
    assert failing and healthy
    slept: list[float] = []
    inject_fault(config, 1, healthy[0], sleep=slept.append)  # returns at once
    with pytest.raises(InjectedFault, match="injected crash: node"):
        inject_fault(config, 1, failing[0], sleep=slept.append)
    assert slept == []
    timeout = config.replace(fault_mode="timeout")
    with pytest.raises(InjectedFault, match="injected timeout"):
        inject_fault(timeout, 1, failing[0], sleep=slept.append)
    assert slept == [2.0 + TIMEOUT_OVERSHOOT]


FAULTY = {"fault-fraction": 0.2, "seed": 0}


def fault_run(tmp_path, nodes, **overrides):
    run_config = {**SMALL, **FAULTY, "results-dir": str(tmp_path / "results"), **overrides}
    config = RunConfig.from_mapping(run_config)
    summary = run_federation(LocalGrid(client_app, run_config, num_nodes=nodes), config)
    return summary, read_rounds(tmp_path), config


def test_a_run_with_failing_nodes_completes_and_reports_the_keyed_failures(tmp_path):
    summary, rows, config = fault_run(tmp_path / "a", 10)
    assert summary["rounds"] == 3 and summary["best_round"] is not None
    expected = [failing_partitions(config, r, range(10)) for r in (1, 2, 3)]
    assert sum(map(len, expected)) > 0
    assert [int(r["train-failures"]) for r in rows] == [len(e) for e in expected]
    for row, failed in zip(rows, expected, strict=True):
        lost = sum(len(users_of_partition(p, 10, 30)) for p in failed)
        assert int(row["train-users"]) == 30 - lost
    _, again, _ = fault_run(tmp_path / "b", 10)
    assert without_seconds(again) == without_seconds(rows)  # same packing: the same run


ROUND_TIMEOUT = 3.0


def test_timeouts_are_missing_replies_with_the_same_outcome_as_crashes(tmp_path, caplog):
    """A timing-out node answers too late: its reply is missing, counted as a failure, and
    the run is the crash-mode run (a failing node trains nothing in either mode)."""
    # The crash-mode run goes first without a timeout: it also compiles the kernels, which a
    # first round would otherwise pay inside the timeout. A healthy node must still answer
    # within the timeout on a loaded machine, so the timeout leaves it several seconds.
    timing = {"fault-mode": "timeout", "round-timeout": ROUND_TIMEOUT}
    _, crashed, config = fault_run(tmp_path / "crash", 5)
    _, timed_out, _ = fault_run(tmp_path / "timeout", 5, **timing)
    expected = [len(failing_partitions(config, r, range(5))) for r in (1, 2, 3)]
    assert sum(expected) > 0
    assert [int(r["train-failures"]) for r in timed_out] == expected
    assert without_seconds(timed_out) == without_seconds(crashed)
    assert "no train reply within the round timeout" in caplog.text
