"""The factored row gradient (``methods.parts.OuterRows``) end to end: a method whose closed
form is marked ``factors_rows`` trains to the same parameters and loss, bit for bit, whether
the optimiser takes the row gradient as its factors or as the [users x batch x r] tensor."""

from typing import Any

import numpy as np
import pytest
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import ROWS, build_method
from fedrec_flwr.methods.parts import OuterRows
from fedrec_flwr.node import host_loops, row_updates
from fedrec_flwr.node.optim import SGD
from fedrec_flwr.node.training import epoch_steps, local_update
from fedrec_lab.testing import STEPS, TINY, cloned, random_samples, row_tables, user_params

FACTORED = [
    {"method": "pfedrec"},
    {"method": "fedmf"},
    {"method": "fedmf", "personalization": "dual"},
    {"method": "fedrecon", "lr": 1.0},
    {"method": "pfedrec", "weight-decay": 0.01},
]


def setup(overrides: dict[str, Any], seed: int):
    config = RunConfig.from_mapping({**TINY, **STEPS, **overrides})
    method = build_method(config, 200)
    rng = np.random.default_rng(seed)
    samples = random_samples(rng, num_users=6, batch=config.training.batch_size)
    start = user_params(method, samples.users, rng)
    start[ROWS] = torch.from_numpy(
        rng.normal(size=(samples.row_offsets[-1], method.row_dim)).astype(np.float32)
    )
    start.update(row_tables(method, samples, rng))
    return config, method, samples, start


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("overrides", FACTORED, ids=lambda o: "-".join(map(str, o.values())))
def test_factored_training_equals_the_tensor_path(overrides, seed, monkeypatch):
    monkeypatch.setattr(row_updates, "COMPILED_ENTRIES", 1)  # the compiled loops on tiny steps
    config, method, samples, start = setup(overrides, seed)
    assert getattr(type(method).closed_form_grads, "outer_rows", False), "not marked"
    calls = []
    factored_loop = host_loops.add_outer_rows
    monkeypatch.setattr(
        host_loops, "add_outer_rows", lambda *a: calls.append(1) or factored_loop(*a)
    )
    factored = cloned(start)
    loss_f, n_f = local_update(method, samples, factored, config, server_round=4)
    assert calls, "the factored row update never ran"

    monkeypatch.setattr(SGD, "takes_outer_rows", False)
    calls.clear()
    tensor = cloned(start)
    loss_t, n_t = local_update(method, samples, tensor, config, server_round=4)
    assert not calls
    assert (loss_f, n_f) == (loss_t, n_t)
    for name in start:
        assert torch.equal(factored[name].view(torch.int32), tensor[name].view(torch.int32)), name


@pytest.mark.parametrize("overrides", FACTORED[:2], ids=lambda o: o["method"])
def test_marked_closed_form_gives_the_factors_of_its_row_gradient(overrides):
    config, method, samples, start = setup(overrides, 3)
    step = epoch_steps(samples, config, 1, 0, torch.device("cpu"))[0]
    others = {n: p[step.users] for n, p in start.items() if n != ROWS}
    rows = start[ROWS][step.rows]
    wrt = (ROWS, *others)
    plain, logits = method.closed_form_grads(step, others, rows, wrt)
    factors, logits_f = method.closed_form_grads(step, others, rows, wrt, outer_rows=True)
    assert isinstance(factors[ROWS], OuterRows) and not isinstance(plain[ROWS], OuterRows)
    assert torch.equal(factors[ROWS].tensor(), plain[ROWS])
    assert torch.equal(logits, logits_f)
    for name in others:
        assert torch.equal(factors[name], plain[name]), name
