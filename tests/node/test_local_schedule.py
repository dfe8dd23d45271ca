"""The local schedule (``weight-decay``, ``lr-decay``, ``lr-step-decay``) from its equations:
SGD's weight decay in closed form (on held rows outside the batch too), each user's own step
count, the round's factor, FedRAP's regulariser steps at the decayed rate, SAM's radius left
alone, Adam's L2 term as torch.optim.Adam's, the default path unchanged, packing invariance."""

import dataclasses

import numpy as np
import pytest
import torch

from fedrec_flwr.config import ConfigError, RunConfig
from fedrec_flwr.methods import ROWS, build_method
from fedrec_flwr.methods.adam_state import ADAM_STEPS, adam_moment_names
from fedrec_flwr.methods.base import Phase, Step
from fedrec_flwr.methods.fedrap import LOCAL
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.optim import SAM, SGD, PrivateAdam
from fedrec_flwr.node.schedule import LocalSchedule
from fedrec_flwr.node.training import (
    RoundSamples,
    _gradient_fn,
    epoch_steps,
    local_update,
    round_context,
)
from fedrec_lab.testing import (
    STEPS,
    TINY,
    cloned,
    only_user,
    random_samples,
    row_tables,
    user_params,
)

CPU = torch.device("cpu")
FEDRAP = {
    **TINY,
    **STEPS,
    "method": "fedrap",
    "fedrap-v1": 0.5,
    "fedrap-v2": 0.05,
    "fedrap-schedule": "constant",
    "fedrap-distance": "bounded",
}


def one_user(rows: int, sample_rows: list[int]) -> RoundSamples:
    """One user holding flat rows 0..rows-1, its samples on ``sample_rows`` (positives)."""
    return RoundSamples(
        users=np.array([0]),
        positions=np.array([0]),
        row_offsets=np.array([0, rows]),
        row_items=np.arange(rows),
        sample_offsets=np.array([0, len(sample_rows)]),
        sample_rows=np.asarray(sample_rows),
        sample_labels=np.ones(len(sample_rows), dtype=np.float32),
    )


def fedrap_start(method, samples, seed=0):
    rng = np.random.default_rng(seed)
    params = user_params(method, samples.users, rng)
    params[ROWS] = torch.from_numpy(
        rng.normal(size=(samples.row_offsets[-1], method.row_dim)).astype(np.float32)
    )
    params.update(row_tables(method, samples, rng))
    return params


class TestLocalSchedule:
    def test_weight_decay_is_sgds_closed_form_on_the_head_and_on_every_held_row(self):
        """Constant gradient ``g``, rate ``l``, decay ``w``: after ``k`` steps
        ``p_k = (1 - l w)^k p_0 - l g sum_{j<k} (1 - l w)^j``; a held row outside the batch
        (no gradient) shrinks by ``(1 - l w)^k``; a row of another user does not move."""
        lr, wd, k = 0.1, 0.3, 7
        samples = RoundSamples(  # user 0 holds rows 0..2 (samples on row 0), user 1 row 3
            users=np.array([0, 1]),
            positions=np.array([0, 1]),
            row_offsets=np.array([0, 3, 4]),
            row_items=np.array([0, 1, 2, 0]),
            sample_offsets=np.array([0, 1, 2]),
            sample_rows=np.array([0, 3]),
            sample_labels=np.ones(2, dtype=np.float32),
        )
        config = RunConfig.from_mapping({"batch-size": 4})
        context = round_context(samples, config, 1, CPU)
        step = epoch_steps(samples, config, 1, 0, CPU)[0]
        step = dataclasses.replace(step, users=step.users[:1], rows=step.rows[:1])
        start = {"head": torch.tensor([[2.0, -1.0], [5.0, 5.0]]), ROWS: torch.ones(4, 3)}
        g_head, g_row = torch.tensor([[0.5, 0.25]]), torch.tensor([0.2, -0.4, 0.0])
        grads = {"head": g_head, ROWS: torch.zeros(1, step.rows.shape[1], 3)}
        grads[ROWS][0, 0] = g_row

        params = cloned(start)
        sgd = SGD({"head": lr, ROWS: lr}, (ROWS,), wd, context)
        for _ in range(k):
            sgd.step(params, step, lambda offsets: (grads, None))

        shrink = (1 - lr * wd) ** k
        geometric = sum((1 - lr * wd) ** j for j in range(k))
        head = shrink * start["head"][0].double() - lr * g_head[0].double() * geometric
        row = shrink * 1.0 - lr * g_row.double() * geometric
        torch.testing.assert_close(params["head"][0].double(), head, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(params[ROWS][0].double(), row, rtol=1e-6, atol=1e-7)
        for held in (1, 2):
            torch.testing.assert_close(
                params[ROWS][held].double(), torch.full((3,), shrink, dtype=torch.float64)
            )
        assert torch.equal(params["head"][1], start["head"][1])  # user 1 took no step
        assert torch.equal(params[ROWS][3], start[ROWS][3])

    @pytest.mark.parametrize("sampler", ["keyed-numpy", "counter"])
    def test_each_user_counts_its_own_steps_and_the_round_sets_the_first_rate(self, sampler):
        """Users of 3 and 1 batches over 2 epochs: the first takes ``gamma^0..gamma^5``, the
        second ``gamma^0, gamma^1``, all times ``decay^(r - 1)``."""
        gamma, decay, server_round = 0.9, 0.97, 4
        samples = RoundSamples(
            users=np.array([0, 1]),
            positions=np.array([0, 1]),
            row_offsets=np.array([0, 5, 8]),
            row_items=np.r_[np.arange(5), np.arange(3)],
            sample_offsets=np.array([0, 10, 3 + 10]),
            sample_rows=np.r_[np.arange(10) % 5, 5 + np.arange(3)],
            sample_labels=np.ones(13, dtype=np.float32),
        )
        config = RunConfig.from_mapping(
            {
                "batch-size": 4,
                "local-epochs": 2,
                "lr-decay": decay,
                "lr-step-decay": gamma,
                "negative-sampler": sampler,
            }
        )
        context = round_context(samples, config, server_round, CPU)
        schedule = LocalSchedule.of(config, context)
        seen: dict[int, list[float]] = {0: [], 1: []}
        for epoch in range(2):
            for planned in epoch_steps(samples, config, server_round, epoch, CPU):
                step = schedule.scaled(planned)
                for user, scale in zip(step.users.tolist(), step.lr_scale.tolist(), strict=True):
                    seen[user].append(scale)
        first = decay ** (server_round - 1)
        assert seen[0] == pytest.approx([first * gamma**s for s in range(6)], rel=1e-12)
        assert seen[1] == pytest.approx([first * gamma**s for s in range(2)], rel=1e-12)
        assert LocalSchedule.of(RunConfig.from_mapping({"weight-decay": 0.1}), context) is None

    def test_a_steps_factor_scales_each_users_rate_of_sgd_and_only_the_step_of_sam(self):
        config = RunConfig.from_mapping({**FEDRAP, "sam-rho-private": 0.05})
        method = build_method(config, num_items=200)
        rng = np.random.default_rng(3)
        samples = random_samples(rng, num_users=3, batch=config.training.batch_size)
        start = fedrap_start(method, samples)
        step = epoch_steps(samples, config, 1, 0, CPU)[0]
        scale = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64)[: len(step.users)]
        phase = method.phases()[0]
        roles, rows = method.roles(), layout(method).rows
        base = {n: method.learning_rate(n) for n in roles}

        def run(optimizer, step):
            params = cloned(start)
            optimizer.step(params, step, _gradient_fn(method, params, step, phase, rows))
            return params

        for wrap in (lambda inner: inner, lambda inner: SAM(inner, roles, 0.05, 0.05)):
            scaled = run(wrap(SGD(base, rows)), dataclasses.replace(step, lr_scale=scale))
            for j, user in enumerate(step.users.tolist()):  # user j alone at lr * scale[j]
                one = {n: lr * float(scale[j]) for n, lr in base.items()}
                alone = run(wrap(SGD(one, rows)), step)
                lo, hi = samples.row_offsets[user], samples.row_offsets[user + 1]
                for name in start:
                    got, want = (
                        (scaled[name][lo:hi], alone[name][lo:hi])
                        if name in rows
                        else (scaled[name][user], alone[name][user])
                    )
                    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)

    @pytest.mark.parametrize("reg_rows", ["batch", "held"])
    def test_fedraps_regulariser_step_takes_the_decayed_rate(self, reg_rows):
        """``batch``: the rate of the user's step; ``held`` (once per epoch, after the
        user's last batch): the mean rate of the epoch's steps. Each equals undecayed
        regulariser steps at those rates (item-lr)."""
        c0, c1 = 0.8, 0.5
        samples = one_user(6, [0, 1, 2, 3])  # batch-size 2: two steps

        def regularised(rates: tuple[float, float], scales: tuple[float, float] | None):
            """Both steps' regularisers, step j by a method at item-lr ``rates[j]``."""
            methods = {}
            for rate in rates:
                config = RunConfig.from_mapping(
                    {**FEDRAP, "batch-size": 2, "item-lr": rate, "fedrap-reg-rows": reg_rows}
                )
                methods[rate] = build_method(config, num_items=6)
            params = fedrap_start(methods[rates[0]], samples)
            context = round_context(samples, config, 1, CPU)
            for method in methods.values():
                method.begin_local_update(params, context)
            steps = epoch_steps(samples, config, 1, 0, CPU)
            assert len(steps) == 2
            for j, step in enumerate(steps):
                if scales is not None:
                    factor = torch.tensor([scales[j]], dtype=torch.float64)
                    step = dataclasses.replace(step, lr_scale=factor)
                phase = Phase("joint", (ROWS, LOCAL))
                methods[rates[j]].after_step(params, step, phase, context)
            return params

        decayed = regularised((1.0, 1.0), (c0, c1))
        mean = (c0 + c1) / 2
        expected = regularised((c0, c1) if reg_rows == "batch" else (mean, mean), None)
        untouched = regularised((1.0, 1.0), (0.0, 0.0))
        for name in (ROWS, LOCAL):
            assert not torch.equal(decayed[name], untouched[name])
            torch.testing.assert_close(decayed[name], expected[name], rtol=1e-6, atol=1e-7)

    def test_adams_weight_decay_is_torch_adams(self):
        lr, wd, scale = 0.01, 0.2, 0.7
        m, v = adam_moment_names("user")
        start = torch.tensor([[1.0, -2.0, 0.5]])
        params = {
            "user": start.clone(),
            m: torch.zeros(1, 3),
            v: torch.zeros(1, 3),
            ADAM_STEPS: torch.zeros(1),
            ROWS: torch.zeros(1, 3),
        }
        step = Step(
            users=torch.tensor([0]),
            rows=torch.zeros(1, 1, dtype=torch.long),
            labels=torch.zeros(1, 1),
            weights=torch.zeros(1, 1),
            lr_scale=torch.tensor([scale], dtype=torch.float64),
        )
        adam = PrivateAdam({"user": lr, ROWS: 0.0}, (ROWS,), ("user",), wd, None)
        reference = start[0].clone().requires_grad_(True)
        torch_adam = torch.optim.Adam([reference], lr=lr * scale, weight_decay=wd)
        for k in range(5):
            grad = torch.tensor([[0.3, -0.1 * k, 0.05]])
            adam.apply(params, step, {"user": grad})
            reference.grad = grad[0].clone()
            torch_adam.step()
        torch.testing.assert_close(params["user"][0], reference.detach(), rtol=1e-6, atol=1e-7)

    def test_the_defaults_take_the_steps_of_plain_sgd_bit_for_bit(self):
        """Keys at their defaults (and absent): exactly ``p - lr * g`` and FedRAP's
        regulariser, step after step (the optimiser as it is without the schedule)."""
        keys = {"weight-decay": 0.0, "lr-decay": 1.0, "lr-step-decay": 1.0}
        rng = np.random.default_rng(1)
        samples = random_samples(rng, num_users=4, batch=16)
        results = []
        for config in (RunConfig.from_mapping(FEDRAP), RunConfig.from_mapping({**FEDRAP, **keys})):
            method = build_method(config, num_items=200)
            params = fedrap_start(method, samples)
            local_update(method, samples, params, config, server_round=3)
            results.append(params)

        config = RunConfig.from_mapping(FEDRAP)
        method = build_method(config, num_items=200)
        params = fedrap_start(method, samples)  # by hand: no schedule, no weight decay
        context = round_context(samples, config, 3, CPU)
        method.begin_local_update(params, context)
        rows = layout(method).rows
        phase = method.phases()[0]
        for epoch in range(config.training.local_epochs):
            for step in epoch_steps(samples, config, 3, epoch, CPU):
                grads, _ = _gradient_fn(method, params, step, phase, rows)(None)
                for name, grad in grads.items():
                    lr = method.learning_rate(name)
                    if name in rows:
                        flat = grad.reshape(-1, grad.shape[-1])
                        params[name].index_add_(0, step.rows.reshape(-1), flat, alpha=-lr)
                    else:
                        params[name][step.users] = params[name][step.users] - lr * grad
                method.after_step(params, step, phase, context)
        for result in results:
            for name in params:
                assert torch.equal(result[name], params[name]), name

    @pytest.mark.parametrize("reg_rows", ["batch", "held"])
    def test_packed_training_with_the_schedule_equals_each_user_alone(self, reg_rows):
        schedule = {"weight-decay": 0.01, "lr-decay": 0.9, "lr-step-decay": 0.8}
        config = RunConfig.from_mapping({**FEDRAP, **schedule, "fedrap-reg-rows": reg_rows})
        method = build_method(config, num_items=200)
        rng = np.random.default_rng(0)
        samples = random_samples(rng, num_users=6, batch=config.training.batch_size)
        start = fedrap_start(method, samples)
        packed = cloned(start)
        local_update(method, samples, packed, config, server_round=4)
        plain = cloned(start)
        local_update(method, samples, plain, RunConfig.from_mapping(FEDRAP), server_round=4)
        rows = layout(method).rows
        for j in range(len(samples.users)):
            lo, hi = samples.row_offsets[j], samples.row_offsets[j + 1]
            alone = {n: v[j : j + 1].clone() for n, v in start.items() if n not in rows}
            alone.update({n: start[n][lo:hi].clone() for n in rows})
            local_update(method, only_user(samples, j), alone, config, 4)
            for name, value in alone.items():
                together = packed[name][lo:hi] if name in rows else packed[name][j : j + 1]
                assert torch.equal(together, value), (name, j)
                other = plain[name][lo:hi] if name in rows else plain[name][j : j + 1]
                assert not torch.equal(together, other), (name, j)  # the schedule acted

    @pytest.mark.parametrize(
        ("key", "value"),
        [("weight-decay", -0.1), ("lr-decay", 0.0), ("lr-decay", 1.5), ("lr-step-decay", -1.0)],
    )
    def test_bad_values_are_refused_with_the_allowed_range(self, key, value):
        with pytest.raises(ConfigError, match=key):
            RunConfig.from_mapping({key: value})
