"""The mini-batch plan in tensor ops (``negative-sampler = "counter"``): every sample once
per epoch, a user's batches whatever other users share the plan, shuffles keyed by (seed,
user, round, stage, epoch), a number of tensor operations that does not grow with the users,
and a packed run equal to a one-user-per-node run."""

from __future__ import annotations

import csv
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from fedrec_flwr.client_app import app as client_app
from fedrec_flwr.config import RunConfig
from fedrec_flwr.node import lockstep
from fedrec_flwr.node.lockstep import PAD_TO, shuffle_tag, tensor_epoch_steps
from fedrec_flwr.node.training import user_widths
from fedrec_flwr.server_app import run_federation
from fedrec_lab.local_grid import LocalGrid
from fedrec_lab.stats import read_per_user


def plan(counts, users=None, batch=8, seed=0, server_round=1, tag=0, max_entries=1 << 22):
    counts = np.asarray(counts, np.int64)
    offsets = np.r_[0, np.cumsum(counts)]
    users = np.arange(len(counts)) * 7 + 3 if users is None else np.asarray(users)
    rows = torch.arange(int(offsets[-1]))
    local = rows - torch.from_numpy(np.repeat(offsets[:-1], counts))
    labels = (local % 3 == 0).float()  # a user's labels: a function of its own samples
    widths = user_widths(counts, batch)
    steps = tensor_epoch_steps(
        offsets, rows, labels, users, widths, batch, seed, server_round, tag, max_entries
    )
    return offsets, steps


def batches_of(offsets, steps, padding_at_zero=True):
    """Each user's batches: (its sample indices, labels, weights) per step, in order.
    ``padding_at_zero``: padding entries point at row 0 (else anywhere among the rows)."""
    out: dict[int, list] = {}
    for step in steps:
        for k, j in enumerate(step.users.tolist()):
            real = step.weights[k] > 0
            assert not step.weights[k][~real].any()
            padding = step.rows[k][~real]
            if padding_at_zero:
                assert not padding.any()
            else:
                assert ((padding >= 0) & (padding < int(offsets[-1]))).all()
            rows = step.rows[k][real] - int(offsets[j])
            out.setdefault(j, []).append(
                (rows.tolist(), step.labels[k][real].tolist(), step.weights[k][real].tolist())
            )
    return out


@pytest.mark.parametrize("max_entries", [1 << 22, 40])
@pytest.mark.parametrize("batch", [8, 2000])
def test_every_sample_once_per_epoch_on_its_user(batch, max_entries):
    counts = [5, 0, 30, 8, 70, 1, 17]
    offsets, steps = plan(counts, batch=batch, max_entries=max_entries)
    for step in steps:
        assert step.rows.shape[1] % PAD_TO == 0
    batches = batches_of(offsets, steps)
    for j, count in enumerate(counts):
        mine = batches.get(j, [])
        assert len(mine) == -(-count // batch)
        seen = [i for rows, _, _ in mine for i in rows]
        assert sorted(seen) == list(range(count))
        for rows, labels, weights in mine:
            assert len(rows) == min(batch, count - batch * mine.index((rows, labels, weights)))
            assert labels == [float(i % 3 == 0) for i in rows]
            assert sum(weights) == pytest.approx(1.0)


def test_the_step_bound_only_regroups_the_users_batches():
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 300, 120)
    offsets, small = plan(counts, batch=64, max_entries=200)
    _, large = plan(counts, batch=64, max_entries=1 << 22)
    assert len(large) < len(small)
    assert batches_of(offsets, small) == batches_of(offsets, large)


def test_accelerators_take_larger_steps_than_the_cpu():
    assert lockstep.step_entries(torch.device("cpu")) == lockstep.MAX_STEP_ENTRIES
    assert lockstep.step_entries(torch.device("cuda")) == lockstep.DEVICE_STEP_ENTRIES
    assert lockstep.DEVICE_STEP_ENTRIES > lockstep.MAX_STEP_ENTRIES


def test_a_users_batches_do_not_depend_on_the_others():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 60, 50)
    users = np.arange(50) * 11 + 1
    offsets, steps = plan(counts, users)
    together = batches_of(offsets, steps)
    for j in (0, 7, 31, 49):
        alone_offsets, alone_steps = plan(counts[j : j + 1], users[j : j + 1])
        assert batches_of(alone_offsets, alone_steps).get(0, []) == together.get(j, [])


def test_shuffles_are_keyed_by_seed_round_and_epoch():
    def order(**key):
        offsets, steps = plan([40], batch=64, **key)
        return batches_of(offsets, steps)[0][0][0]

    base = order()
    assert order() == base
    assert sorted(base) == list(range(40)) and base != list(range(40))
    for other in ({"seed": 1}, {"server_round": 2}, {"tag": shuffle_tag(1, 0)}):
        assert order(**other) != base
    assert shuffle_tag(1, 0) != shuffle_tag(0, 1)
    with pytest.raises(ValueError, match="local epochs"):
        shuffle_tag(1 << 12, 0)


class OpCount(TorchDispatchMode):
    """Counts the aten operators dispatched while active."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("compiled", [False, True])
def test_the_plan_dispatches_as_many_operators_for_ten_users_as_for_a_thousand(
    compiled, monkeypatch
):
    """Tensor ops (a device's path) or the host's compiled loops: either way."""
    monkeypatch.setattr(lockstep, "COMPILED_SAMPLES", 0 if compiled else 1 << 62)
    rng = np.random.default_rng(1)
    counts = {n: np.r_[rng.integers(1, 40, n - 1), 40] for n in (10, 1000)}  # 5 batches max
    totals = {}
    for n, c in counts.items():
        with OpCount() as mode:
            plan(c, batch=8)
        totals[n] = sum(mode.ops.values())
    assert totals[10] == totals[1000] > 0


def test_a_packed_counter_run_equals_one_user_per_node(tmp_path, private_cache):
    config = {
        "dataset": "synthetic",
        "synthetic-users": 12,
        "synthetic-items": 200,
        "synthetic-mean-degree": 15,
        "num-server-rounds": 3,
        "batch-size": 16,
        "local-epochs": 2,
        "item-lr": 0.5,
        "negative-sampler": "counter",
        "run-name": "run",
    }
    rows, per_user = {}, {}
    for nodes in (1, 12):
        folder = tmp_path / str(nodes)
        run_config = {**config, "results-dir": str(folder)}
        run_federation(
            LocalGrid(client_app, run_config, num_nodes=nodes),
            RunConfig.from_mapping(run_config),
        )
        with open(folder / "run" / "rounds.csv") as f:
            rows[nodes] = list(csv.DictReader(f))
        per_user[nodes] = read_per_user(folder / "run")
    # each user's metrics and the train loss bit for bit; the means up to the order in
    # which the server adds the nodes' sums
    np.testing.assert_array_equal(per_user[1][0], per_user[12][0])
    for name, values in per_user[1][1].items():
        np.testing.assert_array_equal(values, per_user[12][1][name])
    for one, packed in zip(rows[1], rows[12], strict=True):
        assert one["train-loss"] == packed["train-loss"]
        for key in one:
            if key.startswith(("val-", "test-")) and one[key]:
                assert float(one[key]) == pytest.approx(float(packed[key]), rel=1e-12)
    assert float(rows[1][-1]["train-loss"]) < float(rows[1][0]["train-loss"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CPU==CUDA check)")
def test_cpu_and_cuda_build_the_same_plan():
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 700, 300)
    offsets = np.r_[0, np.cumsum(counts)]
    rows = torch.arange(int(offsets[-1]))
    labels = (rows % 5 == 0).float()
    users = np.arange(300) * 3
    args = (offsets, users, user_widths(counts, 256), 256, 7, 4, shuffle_tag(1, 0))

    def build(device):
        offsets, users, widths, batch, seed, server_round, tag = args
        return tensor_epoch_steps(
            offsets,
            rows.to(device),
            labels.to(device),
            users,
            widths,
            batch,
            seed,
            server_round,
            tag,
            lockstep.MAX_STEP_ENTRIES,  # the same cut and layout on both (by default a
            uniform=False,  # device's steps are larger and of one width)
        )

    for cpu, cuda in zip(build("cpu"), build("cuda"), strict=True):
        for name in ("users", "rows", "labels", "weights"):
            torch.testing.assert_close(
                getattr(cuda, name).cpu(), getattr(cpu, name), rtol=0, atol=0
            )


@pytest.mark.parametrize("batch", [8, 64])
def test_the_compiled_scatter_builds_the_same_steps(batch, monkeypatch):
    rng = np.random.default_rng(batch)
    counts = rng.integers(0, 90, 40)
    built = {}
    for compiled in (False, True):
        monkeypatch.setattr(lockstep, "COMPILED_SAMPLES", 0 if compiled else 1 << 62)
        built[compiled] = plan(counts, batch=batch, max_entries=300)[1]
    assert len(built[True]) == len(built[False]) > 1
    for a, b in zip(built[False], built[True], strict=True):
        for name in ("users", "rows", "labels", "weights"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and torch.equal(x, y), name


@pytest.mark.parametrize("max_entries", [1 << 22, 4096])
def test_the_uniform_layout_gives_each_user_the_same_batches_in_fewer_steps(max_entries):
    rng = np.random.default_rng(11)
    counts = np.asarray(rng.integers(0, 200, 80), np.int64)
    offsets = np.r_[0, np.cumsum(counts)]
    rows = torch.arange(int(offsets[-1]))
    labels = (rows % 4 == 0).float()
    users = np.arange(len(counts)) * 5 + 1
    built = {}
    for uniform in (False, True):
        widths = user_widths(counts, 256, full=uniform)
        built[uniform] = tensor_epoch_steps(
            offsets, rows, labels, users, widths, 256, 3, 2, 0, max_entries, uniform=uniform
        )
    if max_entries > 80 * 256:  # no cut: one step against one per width
        assert len(built[True]) == 1 < len(built[False])
    widths = {step.rows.shape[1] for step in built[True]}
    assert widths == {int(user_widths(counts, 256).max())}
    uniform = batches_of(offsets, built[True], padding_at_zero=False)
    assert uniform == batches_of(offsets, built[False])


def test_the_uniform_layout_spreads_its_padding_over_the_rows():
    """A device's deterministic ``index_add_`` sums a row's entries one after another: the
    uniform layout's padding (zero weight) points at many rows, not all at row 0."""
    counts = np.asarray([3, 250, 40, 0, 7] * 20, np.int64)
    offsets = np.r_[0, np.cumsum(counts)]
    rows = torch.arange(int(offsets[-1])) * 2 + 5  # the samples' rows: none is row 0
    labels = torch.zeros(len(rows))
    widths = user_widths(counts, 256, full=True)
    steps = tensor_epoch_steps(
        offsets, rows, labels, np.arange(100), widths, 256, 1, 1, 0, uniform=True
    )
    for step in steps:
        padding = step.rows[step.weights == 0]
        assert len(padding) > 1000
        assert torch.isin(padding, rows).all()
        most = int(torch.unique(padding, return_counts=True)[1].max())
        assert most <= -(-step.rows.numel() // len(rows))  # entries over samples, not all
    narrow = tensor_epoch_steps(
        offsets, rows, labels, np.arange(100), user_widths(counts, 256), 256, 1, 1, 0, uniform=False
    )
    assert all(not step.rows[step.weights == 0].any() for step in narrow)  # the CPU's: row 0


def test_only_an_accelerator_takes_the_uniform_layout():
    assert not lockstep.uniform_steps(torch.device("cpu"))
    assert lockstep.uniform_steps(torch.device("cuda"))
    assert list(user_widths(np.asarray([3, 70, 0]), 256, full=True)) == [128, 128, 128]
    assert list(user_widths(np.asarray([3, 70, 0]), 256)) == [64, 128, 64]
    assert len(user_widths(np.asarray([], np.int64), 64, full=True)) == 0


def test_a_run_in_the_uniform_layout_agrees_with_the_cpu_s_within_rounding(
    tmp_path, private_cache, monkeypatch
):
    """The accelerator's layout forced on the CPU: the same samples in fewer steps of one
    width, so the same per-user results up to float32 rounding."""
    config = {
        "dataset": "synthetic",
        "synthetic-users": 30,
        "synthetic-items": 150,
        "synthetic-mean-degree": 30,
        "num-server-rounds": 3,
        "batch-size": 256,
        "local-epochs": 2,
        "negative-sampler": "counter",
        "run-name": "run",
    }
    per_user, rows, steps = {}, {}, {}
    for uniform in (False, True):
        counted = []

        def counting(*args, u=uniform, counted=counted, **kwargs):
            built = tensor_epoch_steps(*args, **{**kwargs, "uniform": u})
            counted.append(len(built))
            return built

        monkeypatch.setattr("fedrec_flwr.node.training.tensor_epoch_steps", counting)
        monkeypatch.setattr("fedrec_flwr.node.training.uniform_steps", lambda device, u=uniform: u)
        folder = tmp_path / str(uniform)
        run_config = {**config, "results-dir": str(folder)}
        run_federation(
            LocalGrid(client_app, run_config, num_nodes=1), RunConfig.from_mapping(run_config)
        )
        with open(folder / "run" / "rounds.csv") as f:
            rows[uniform] = list(csv.DictReader(f))
        per_user[uniform], steps[uniform] = read_per_user(folder / "run"), sum(counted)
    assert steps[True] < steps[False]
    for base, wide in zip(rows[False], rows[True], strict=True):
        assert float(wide["train-loss"]) == pytest.approx(float(base["train-loss"]), rel=1e-6)
    for name, values in per_user[False][1].items():
        np.testing.assert_allclose(per_user[True][1][name], values, rtol=0, atol=1e-5)
