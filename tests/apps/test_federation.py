"""The Flower apps end to end in-process (LocalGrid): packing invariance, privacy of replies."""

import json

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.device import DataIdentity
from fedrec_flwr.messages import DENSE_PREFIX, allowed_upload_keys, record_arrays
from fedrec_flwr.methods import build_method
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node import context_state
from fedrec_flwr.server.strategy import FederationError
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid

SMALL = {
    "dataset": "synthetic",
    "synthetic-users": 30,
    "synthetic-items": 400,
    "synthetic-mean-degree": 12,
    "num-server-rounds": 3,
    "batch-size": 32,
    "item-lr": 0.5,
}


pytestmark = pytest.mark.usefixtures("private_cache")


def run(tmp_path, nodes, keep_messages=False, **overrides):
    run_config = {**SMALL, "results-dir": str(tmp_path / "results"), **overrides}
    grid = LocalGrid(client_app, run_config, num_nodes=nodes, keep_messages=keep_messages)
    summary = run_federation(grid, RunConfig.from_mapping(run_config))
    return summary, grid


def rounds_csv(tmp_path):
    (run_dir,) = (tmp_path / "results").iterdir()
    return (run_dir / "rounds.csv").read_text().splitlines()


@pytest.mark.parametrize("method", ["pfedrec", "fedmf"])
@pytest.mark.parametrize("protocol", ["paper", "strict"])
def test_same_seed_same_metrics_whatever_the_number_of_nodes(tmp_path, method, protocol):
    """N = 1 (all users packed), 4, and 30 (one user per node) give the same run."""
    metrics = {}
    for nodes in (1, 4, 30):
        out = tmp_path / str(nodes)
        run(out, nodes, method=method, protocol=protocol)
        rows = [line.split(",") for line in rounds_csv(out)]
        header = rows[0]
        metrics[nodes] = {
            name: [float(r[header.index(name)]) for r in rows[1:]]
            for name in header
            if name.startswith(("val-", "test-", "train-loss"))
        }
    for nodes in (4, 30):
        for name, values in metrics[1].items():
            assert metrics[nodes][name] == pytest.approx(values, rel=1e-9, abs=1e-12), name
    assert metrics[1]["val-hr@10"][-1] > 0  # it learned something


def test_partial_participation_is_also_invariant(tmp_path):
    a, _ = run(tmp_path / "a", 1, **{"fraction-train": 0.3, "num-server-rounds": 4})
    b, _ = run(tmp_path / "b", 7, **{"fraction-train": 0.3, "num-server-rounds": 4})
    assert a["test"] == pytest.approx(b["test"], rel=1e-9)
    assert a["best_round"] == b["best_round"]


def test_replies_never_carry_private_parameters(tmp_path):
    _, grid = run(tmp_path, 5, keep_messages=True, method="pfedrec", protocol="strict")
    method = build_method(RunConfig.from_mapping({**SMALL, "method": "pfedrec"}), 400)
    allowed_arrays = allowed_upload_keys(layout(method).shared_dense)
    for reply in grid.replies:
        for record in reply.content.values():
            if isinstance(record, ArrayRecord):
                arrays = record_arrays(record)  # what the server reads, packed or not
                assert set(arrays) <= allowed_arrays
                for name, array in arrays.items():
                    # ids and counts are integers; the only floats are the summed item rows
                    # (and the sums of shared-dense parameters, which PFedRec has none of)
                    # and the evaluated users' metrics (of their ranks, in [0, 1])
                    floats = name in ("row-sums", "user-metrics") or name.startswith(DENSE_PREFIX)
                    assert array.dtype.kind == "i" or floats, name
            elif isinstance(record, ConfigRecord):  # the handshake's data identity, no more
                assert reply.metadata.message_type == "query"
                assert set(record) == set(DataIdentity.from_record(record).to_record())
                assert record["data-source"] == "shared"
            else:
                assert isinstance(record, MetricRecord)
                assert all(isinstance(v, (int, float)) for v in record.values())
    # No value of any user's private score function appears among the uploaded floats.
    uploaded = np.concatenate(
        [
            arrays["row-sums"].ravel()
            for arrays in (record_arrays(r.content["arrays"]) for r in grid.replies)
            if "row-sums" in arrays
        ]
    )
    private = np.concatenate(
        [
            context_state.load(c).private[name].numpy().ravel()
            for c in grid.contexts.values()
            for name in ("score-weight", "score-bias")
        ]
    )
    assert len(private) == 30 * 33 and len(uploaded) > 1000
    assert not np.isin(private, uploaded).any()


def test_results_files(tmp_path):
    run(tmp_path, 2, protocol="strict", **{"run-name": "demo"})
    run_dir = tmp_path / "results" / "demo"
    assert {p.name for p in run_dir.iterdir()} == {
        "config.json",
        "rounds.csv",
        "summary.json",
        "curves.png",
        "per-user.csv",
    }
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk["method"] == "pfedrec" and on_disk["protocol"] == "strict"
    assert set(on_disk["test"]) == {"hr@10", "ndcg@10", "recall@20", "ndcg@20", "mrr"} | {
        "s100-hr@10",
        "s100-ndcg@10",
    }
    assert 1 <= on_disk["best_round"] <= 3
    lines = (run_dir / "rounds.csv").read_text().splitlines()
    assert len(lines) == 1 + 3 and lines[0].startswith("round,seconds,train-loss")
    config = json.loads((run_dir / "config.json").read_text())
    assert config["run-name"] == "demo" and config["num_users"] == 30
    # A second run with the same name never overwrites the first.
    run(tmp_path, 2, protocol="strict", **{"run-name": "demo"})
    assert (tmp_path / "results" / "demo-2" / "summary.json").exists()


def test_a_failing_node_is_skipped_with_a_log_line(tmp_path, caplog):
    calls = {"n": 0}

    def flaky(message, context):
        if message.metadata.message_type == "train" and context.node_config["partition-id"] == 1:
            calls["n"] += 1
            raise RuntimeError("device went offline")
        return client_app(message, context)

    run_config = {**SMALL, "results-dir": str(tmp_path / "results")}
    grid = LocalGrid(flaky, run_config, num_nodes=3)
    summary = run_federation(grid, RunConfig.from_mapping(run_config))
    assert calls["n"] == 3
    assert "failed to train" in caplog.text or summary["rounds"] == 3
    (run_dir,) = (tmp_path / "results").iterdir()
    rows = (run_dir / "rounds.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert all(r.split(",")[header.index("train-failures")] == "1" for r in rows[1:])


def test_a_node_that_cannot_start_stops_the_run_with_its_reason(tmp_path):
    def broken(message, context):
        raise RuntimeError("cannot read data on this device")

    run_config = {**SMALL, "results-dir": str(tmp_path / "results")}
    with pytest.raises(FederationError, match="cannot read data on this device"):
        run_federation(
            LocalGrid(broken, run_config, num_nodes=2), RunConfig.from_mapping(run_config)
        )
