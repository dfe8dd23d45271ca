"""The method conformance suite: what every method must satisfy, as LensKit-style mixins.

A method's test class inherits :class:`MethodConformance` (every mixin below) or the mixins it
wants, and sets ``config`` (run-config overrides naming the method and its settings):

- :class:`StepConformance`: (1) training a node's users packed together equals training them
  one at a time (bit-exact when the method has a closed-form gradient, else within 1e-6
  relative); (2) the closed-form gradient equals autograd's, phase by phase; (3)
  ``logits_all`` equals ``logits`` on the table expanded per user;
- :class:`StateConformance`: (4) the node state survives ``context.state`` bit for bit;
- :class:`FederationConformance`: (5) no reply carries a private or personal parameter of the
  method (keys, dtypes, values); (6) same seed, same metrics, whatever the number of nodes;
  (7) the train loss falls over a few rounds, and below that of the same run without
  learning; (8) a failing node does not stop aggregation.

Everything runs on tiny synthetic data (:mod:`fedrec_lab.testing._data`) so that the whole
suite stays within seconds.
"""

from __future__ import annotations

import csv
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord, RecordDict

from fedrec_flwr.client_app import STATE_KEY, load_state, save_state
from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.messages import DENSE_PREFIX, allowed_upload_keys, record_arrays
from fedrec_flwr.methods import ROWS, Method, build_method
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node import context_state
from fedrec_flwr.node.runtime import NodeRuntime, NodeState
from fedrec_flwr.node.training import autograd_grads, epoch_steps, local_update
from fedrec_flwr.results import TIMING_COLUMNS, RunRecorder
from fedrec_flwr.server_app import initial_item_table, run_federation
from fedrec_lab.local_grid import LocalGrid
from fedrec_lab.testing._data import (
    STEPS,
    TINY,
    Run,
    Uploads,
    cloned,
    only_user,
    random_samples,
    row_tables,
    user_params,
)

_RUNS: dict[tuple, Run] = {}  # federation runs shared between tests of one class


class ConformanceBase:
    """What every conformance mixin reads: the class's ``config`` and the runs it builds."""

    #: Run-config overrides that select the method (and its settings).
    config: ClassVar[dict[str, Any]] = {}
    #: Rounds over which the train loss must fall (test 7).
    loss_rounds: ClassVar[int] = 3

    @pytest.fixture(autouse=True)
    def _quick_runs(self, tmp_path_factory, monkeypatch):
        """One prepared-data cache for the suite, away from the user's cache; no
        ``curves.png`` (three quarters of a tiny run's time; test_federation checks it)."""
        monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
        monkeypatch.setattr(RunRecorder, "plot", lambda self: None)

    # ---------------------------------------------------------------- helpers
    def run_config(self, **overrides: Any) -> RunConfig:
        """The federation config: TINY, then the class's ``config``, then ``overrides``."""
        return RunConfig.from_mapping({**TINY, **self.config, **overrides})

    def step_config(self) -> RunConfig:
        return RunConfig.from_mapping({**TINY, **STEPS, **self.config})

    def build(self, config: RunConfig, num_items: int = 200) -> Method:
        return build_method(config, num_items)

    def has_closed_form(self, method: Method, config: RunConfig) -> bool:
        """Does ``closed_form_grads`` answer for every phase of the method?"""
        rng = np.random.default_rng(1)
        samples = random_samples(rng, 2, config.training.batch_size)
        params = user_params(method, samples.users, rng)
        rows = torch.randn(int(samples.row_offsets[-1]), method.row_dim)
        flat = row_tables(method, samples, rng)
        answers = []
        for index, stage in enumerate(method.stages()):
            step = epoch_steps(samples, config, 1, 0, torch.device("cpu"), index)[0]
            others = {n: p[step.users] for n, p in params.items()}
            others.update({n: t[step.rows] for n, t in flat.items()})
            for phase in stage.phases:
                grads = method.closed_form_grads(step, others, rows[step.rows], phase.params)
                answers.append(grads is not None)
        return all(answers)

    def federation(
        self, tmp_path_factory, nodes: int, *, tag: str = "", client=None, **overrides
    ) -> Run:
        """A run on LocalGrid with ``nodes`` nodes (cached per class, ``tag`` and settings)."""
        key = (type(self).__name__, nodes, tag, tuple(sorted(overrides.items())))
        if key not in _RUNS:
            out = tmp_path_factory.mktemp(f"{type(self).__name__}-{nodes}-{tag}")
            run_config = {
                **TINY,
                **self.config,
                **{k.replace("_", "-"): v for k, v in overrides.items()},
                "results-dir": str(out / "results"),
            }
            grid = LocalGrid(
                client or client_app, run_config, num_nodes=nodes, keep_messages=tag == "privacy"
            )
            summary = run_federation(grid, RunConfig.from_mapping(run_config))
            (run_dir,) = (out / "results").iterdir()
            with open(run_dir / "rounds.csv", newline="") as f:
                rounds = list(csv.DictReader(f))
            _RUNS[key] = Run(summary, grid, rounds)
        return _RUNS[key]


class StepConformance(ConformanceBase):
    """Tests 1-3: a method's local steps."""

    def test_packed_training_equals_training_each_user_alone(self):
        config = self.step_config()
        method = self.build(config)
        exact = self.has_closed_form(method, config)
        rng = np.random.default_rng(0)
        samples = random_samples(rng, num_users=6, batch=config.training.batch_size)
        start = user_params(method, samples.users, rng)
        start[ROWS] = torch.from_numpy(
            rng.normal(size=(samples.row_offsets[-1], method.row_dim)).astype(np.float32)
        )
        start.update(row_tables(method, samples, rng))
        rows = layout(method).rows

        packed = cloned(start)
        loss_all, n_all = local_update(method, samples, packed, config, server_round=4)
        frozen = set(layout(method).global_rows)
        for name in packed:  # every trained parameter moved, so the comparison means something
            assert torch.equal(packed[name], start[name]) == (name in frozen), name

        loss_alone, n_alone = 0.0, 0
        for j in range(len(samples.users)):
            lo, hi = samples.row_offsets[j], samples.row_offsets[j + 1]
            alone = {n: v[j : j + 1].clone() for n, v in start.items() if n not in rows}
            alone.update({n: start[n][lo:hi].clone() for n in rows})
            loss, n = local_update(method, only_user(samples, j), alone, config, 4)
            loss_alone, n_alone = loss_alone + loss, n_alone + n
            pairs = [
                (n, packed[n][lo:hi] if n in rows else packed[n][j : j + 1], alone[n])
                for n in alone
            ]
            for name, together, by_itself in pairs:
                if exact:  # bit-identical, not just close
                    assert torch.equal(together, by_itself), (name, j)
                else:
                    torch.testing.assert_close(
                        together, by_itself, rtol=1e-6, atol=1e-7, msg=f"{name}, user {j}"
                    )
        epochs = sum(stage.epochs for stage in method.stages() if stage.logged)
        assert n_all == n_alone == samples.sample_offsets[-1] * epochs
        assert loss_all == pytest.approx(loss_alone, rel=1e-5)

    def test_closed_form_gradients_equal_autograd(self):
        config = self.step_config()
        method = self.build(config)
        if not self.has_closed_form(method, config):
            pytest.skip(f"{method.name} has no closed-form gradient (autograd only)")
        rng = np.random.default_rng(2)
        samples = random_samples(rng, num_users=5, batch=config.training.batch_size)
        params = user_params(method, samples.users, rng)
        table = torch.from_numpy(
            rng.normal(size=(samples.row_offsets[-1], method.row_dim)).astype(np.float32)
        )
        flat = row_tables(method, samples, rng)
        checked = 0
        for index, stage in enumerate(method.stages()):
            steps = epoch_steps(samples, config, 3, 0, torch.device("cpu"), index)
            for step in (steps[0], steps[-1]):  # all users, then only the longest ones
                others = {n: p[step.users] for n, p in params.items()}
                others.update({n: t[step.rows] for n, t in flat.items()})
                rows = table[step.rows]
                for phase in stage.phases:
                    fast = method.closed_form_grads(step, others, rows, phase.params)
                    assert fast is not None, phase.name
                    slow = autograd_grads(method, step, others, rows, phase.params)
                    assert set(fast[0]) == set(phase.params), phase.name
                    for name in phase.params:
                        assert fast[0][name].abs().sum() > 0, (phase.name, name)
                        torch.testing.assert_close(
                            fast[0][name],
                            slow[0][name],
                            rtol=1e-5,
                            atol=1e-7,
                            msg=f"phase {phase.name}: d/d{name}",
                        )
                    torch.testing.assert_close(fast[1], slow[1], rtol=1e-6, atol=1e-7)
                    checked += 1
        assert checked >= 2

    def test_logits_all_equals_logits_on_the_table_expanded_per_user(self):
        config = self.step_config()
        method = self.build(config, num_items=37)
        rng = np.random.default_rng(3)
        # Shared-dense copies are identical per user, as evaluation sends them.
        params = user_params(method, np.arange(5), rng, spread=False)
        table = torch.from_numpy(rng.normal(size=(37, method.row_dim)).astype(np.float32))
        everything = method.logits_all(params, table)
        expanded = method.logits(params, table.unsqueeze(0).expand(5, -1, -1))
        assert everything.shape == (5, 37)
        torch.testing.assert_close(everything, expanded, rtol=1e-5, atol=1e-6)
        # Users differ, so a user-independent score (or a mix-up) would show.
        assert not torch.allclose(everything[0], everything[1])


class StateConformance(ConformanceBase):
    """Test 4: the node state round-trips."""

    def test_node_state_round_trips_through_context_state(self):
        config = self.run_config()
        prepared = prepare(config)
        runtime = NodeRuntime(config, prepared, partition_id=1, num_partitions=3)
        method = runtime.method
        state = runtime.initial_state()
        assert set(state.private) == set(layout(method).kept_private)
        table = initial_item_table(config, prepared.num_items, method.row_dim)
        dense = {n: v for n, v in method.init_dense().items() if n in layout(method).shared_dense}
        _, state = runtime.train(state, 1, runtime.users, None, table, dense)
        if layout(method).personal_rows:
            assert len(state.personal.items) > 0

        context = Context(
            run_id=1,
            node_id=7,
            node_config={"partition-id": 1, "num-partitions": 3},
            state=RecordDict(),
            run_config=config.to_mapping(),
        )
        save_state(context, state)
        assert STATE_KEY in context.state
        loaded = load_state(context, runtime)
        assert set(loaded.private) == set(state.private)
        for name, value in state.private.items():
            assert loaded.private[name].dtype == value.dtype, name
            assert torch.equal(loaded.private[name], value), name
        before, after = state.personal.to_arrays(), loaded.personal.to_arrays()
        assert set(before) == set(after)
        for name, array in before.items():
            assert after[name].dtype == array.dtype, name
            assert after[name].shape == array.shape, name
            assert np.array_equal(after[name], array), name
        # Every array of the state, whatever its part, comes back with its dtype and shape.
        saved, restored = state.to_arrays(), loaded.to_arrays()
        assert set(saved) == set(restored) == set(record_arrays(context.state[STATE_KEY]))
        for name, array in saved.items():
            assert restored[name].dtype == array.dtype and restored[name].shape == array.shape
            assert np.array_equal(restored[name], array), name
        assert set(NodeState.from_arrays(saved).private) == set(state.private)

        # Training on from the reloaded state is training on from the original one.
        (a, state_a), (b, state_b) = (
            runtime.train(s, 2, runtime.users, None, table, dense) for s in (state, loaded)
        )
        assert np.array_equal(a.row_sums, b.row_sums)
        for name in state_a.private:
            assert torch.equal(state_a.private[name], state_b.private[name]), name


class FederationConformance(ConformanceBase):
    """Tests 5-8: federations on LocalGrid."""

    def test_replies_carry_no_private_or_personal_parameter(self, tmp_path_factory):
        # One user per node: a node's uploads are then its user's own float32 values.
        users = TINY["synthetic-users"]
        run = self.federation(tmp_path_factory, users, tag="privacy")
        method = self.build(self.run_config())
        allowed = allowed_upload_keys(layout(method).shared_dense)
        uploaded = []
        for reply in run.grid.replies:
            assert not reply.has_error()
            for record in reply.content.values():
                if isinstance(record, ArrayRecord):
                    arrays = record_arrays(record)  # what the server reads, packed or not
                    assert set(arrays) <= allowed, sorted(set(arrays) - allowed)
                    for name, values in arrays.items():
                        if name == "row-sums" or name.startswith(DENSE_PREFIX):
                            uploaded.append(values.ravel())
                        elif name == "user-metrics":  # evaluation results, not parameters
                            assert values.min() >= 0.0 and values.max() <= 1.0
                        else:  # ids and counts are integers; the only floats are those
                            assert values.dtype.kind in "iu", name
                elif isinstance(record, ConfigRecord):  # the handshake's data identity
                    assert all(key.startswith("data-") for key in record), sorted(record)
                    assert all(isinstance(v, (int, str)) for v in record.values())
                else:
                    assert isinstance(record, MetricRecord)
                    assert all(isinstance(v, (int, float)) for v in record.values())
        assert sum(len(u) for u in uploaded) > 100
        sent = Uploads(uploaded)

        kept = [f"{NodeState.PREFIX}{name}" for name in layout(method).kept_private]
        checked = 0
        for context in run.grid.contexts.values():
            # the node's state as its next message reads it (kept beside the context by the
            # in-process grid), every personal row in one CSR store
            held = context_state.load(context)
            assert held is not None, "the in-process grid keeps each node's state"
            state = held.compacted().to_arrays()
            assert {k for k in state if k.startswith(NodeState.PREFIX)} == set(kept)
            for name in kept:
                for user_value in state[name]:  # one slice per user of the node
                    assert not sent.contains(user_value.ravel()), f"{name} found in an upload"
                    checked += 1
            if layout(method).personal_rows:  # positive control: personal rows are uploaded rows
                personal = state["personal-rows"]
                assert len(personal) and all(sent.contains(row) for row in personal)
        assert checked == users * len(kept)

    def test_same_seed_same_metrics_whatever_the_number_of_nodes(self, tmp_path_factory):
        config = self.run_config()
        rel = 1e-9 if self.has_closed_form(self.build(config), config) else 1e-5
        packed = self.federation(tmp_path_factory, 1)
        three = self.federation(tmp_path_factory, 3)
        again = self.federation(tmp_path_factory, 3, tag="again")
        ignored = set(TIMING_COLUMNS)
        assert [{k: v for k, v in r.items() if k not in ignored} for r in three.rounds] == [
            {k: v for k, v in r.items() if k not in ignored} for r in again.rounds
        ]
        for run in (packed, three):  # the method's own replies pass the server's checks
            assert all(r["rejected-replies"] == "0" for r in run.rounds)
        metrics = packed.metrics()
        assert len(metrics) >= 3 and len(packed.rounds) == config.training.num_server_rounds
        for name, values in metrics.items():
            assert three.metrics()[name] == pytest.approx(values, rel=rel, abs=1e-12), name

    def test_train_loss_falls(self, tmp_path_factory):
        rounds = self.loss_rounds
        extra: dict[str, Any] = {}
        if rounds != TINY["num-server-rounds"]:
            extra["num_server_rounds"] = rounds
        loss = self.federation(tmp_path_factory, 1, **extra).metrics()["train-loss"]
        assert len(loss) == rounds
        assert loss[-1] < loss[0], loss
        # Fresh negatives make the loss of an untrained model wander by several percent from
        # round to round; the same run without learning sees the same samples every round.
        frozen: dict[str, Any] = {"lr": 0.0, "item_lr": 0.0, "dense_lr": 0.0}
        untrained = self.federation(tmp_path_factory, 1, **extra, **frozen)
        assert loss[-1] < 0.98 * untrained.metrics()["train-loss"][-1], loss

    def test_a_failing_node_does_not_stop_aggregation(self, tmp_path_factory):
        calls = {"n": 0}

        def flaky(message, context):
            if (
                message.metadata.message_type == "train"
                and context.node_config["partition-id"] == 1
            ):
                calls["n"] += 1
                raise RuntimeError("device went offline")
            return client_app(message, context)

        run = self.federation(tmp_path_factory, 3, tag="flaky", client=flaky)
        rounds = TINY["num-server-rounds"]
        assert calls["n"] == rounds
        assert run.summary["rounds"] == rounds and len(run.rounds) == rounds
        users = TINY["synthetic-users"]
        survivors = users - len(range(1, users, 3))  # node 1 holds users 1, 4, 7, ...
        for row in run.rounds:
            assert row["train-failures"] == "1"
            assert int(row["train-users"]) == survivors  # the others were aggregated
            assert int(row["touched-items"]) > 0
            assert float(row["train-loss"]) > 0


class MethodConformance(StepConformance, StateConformance, FederationConformance):
    """Every conformance test: the class a method's test class inherits."""
