"""SAM's two modes checked against their equations, computed by hand with autograd.

For user u with private parameters ``p``, shared parameters ``s`` (its item rows and its
copy of the shared-dense ones) and loss ``L``; the base gradient ``g = grad L(p, s)``;
``e_p = rho_p g_p / ||g_p||`` and ``e_s = rho_s g_s / ||g_s||``, the norms per user:

- joint: ``h = grad L(p + e_p, s + e_s)``; both groups step with ``h`` (2 evaluations);
- hierarchical: ``h_s = grad_s L(p, s + e_s)``, ``h_p = grad_p L(p + e_p, s)`` (3 evaluations).
"""

import numpy as np
import pytest
import torch

from fedrec_flwr.config import RunConfig
from fedrec_flwr.methods import ROWS, Role, build_method
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.optim import SAM, SGD, SamKeys, SamMode, local_optimizer
from fedrec_flwr.node.training import _gradient_fn, epoch_steps
from fedrec_lab.testing import random_samples, user_params

RHO_PRIVATE, RHO_SHARED = 0.3, 0.2


def small_method(name: str, **changes):
    config = RunConfig.from_fields(
        method=name,
        embedding_dim=4,
        ncf_mlp_dim=8,
        ncf_layers="8,4",
        batch_size=16,
        lr=0.7,
        item_lr=2.0,
        dense_lr=0.5,
        item_lr_scaling="none",
        sam_rho_private=RHO_PRIVATE,
        sam_rho_shared=RHO_SHARED,
        **changes,
    )
    return build_method(config, num_items=40)


def a_step(method, seed=0):
    """Parameters of 4 users (own rows each) and the first step of their epoch."""
    rng = np.random.default_rng(seed)
    samples = random_samples(rng, num_users=4, batch=method.config.training.batch_size)
    params = user_params(method, samples.users, rng)
    params[ROWS] = torch.from_numpy(
        rng.normal(size=(samples.row_offsets[-1], method.row_dim)).astype(np.float32)
    )
    return params, epoch_steps(samples, method.config, 1, 0, torch.device("cpu"))[0]


# ------------------------------------------------------------------ by hand
def by_hand_gradients(method, step, table, per_user):
    """Gradient of the step's loss w.r.t. the whole row table and the users' parameters."""
    table = table.detach().requires_grad_()
    per_user = {n: p.detach().requires_grad_() for n, p in per_user.items()}
    rows = table[step.rows]
    loss = method.loss(step, per_user, rows, method.logits(per_user, rows))
    grads = torch.autograd.grad(loss, [table, *per_user.values()])
    return {ROWS: grads[0], **dict(zip(per_user, grads[1:], strict=True))}


def is_private(method, name: str) -> bool:
    return name != ROWS and method.roles()[name] is Role.PRIVATE


def by_hand_offsets(method, step, grads, group_private: bool, rho: float):
    """``rho g / ||g||`` over one group, one norm per user (a user's rows: those it trains)."""
    names = [n for n in grads if is_private(method, n) == group_private]
    offsets = {n: torch.zeros_like(grads[n]) for n in names}
    for k in range(len(step.users)):
        own_rows = torch.unique(step.rows[k][step.weights[k] > 0])
        parts = [grads[n][own_rows] if n == ROWS else grads[n][k] for n in names]
        norm = torch.sqrt(sum((part.double() ** 2).sum() for part in parts))
        for name in names:
            where = own_rows if name == ROWS else k
            offsets[name][where] = grads[name][where] * (rho / norm).float()
    return offsets


def moved(point, offsets):
    return {n: p + offsets[n] if n in offsets else p for n, p in point.items()}


def expected_update(method, params, step, mode: SamMode):
    """The parameters after one SAM step, from the equations of the module's doc."""
    per_user = {n: p[step.users] for n, p in params.items() if n != ROWS}
    point = {ROWS: params[ROWS], **per_user}

    def at(p):
        return by_hand_gradients(method, step, p[ROWS], {n: v for n, v in p.items() if n != ROWS})

    base = at(point)
    e_p = by_hand_offsets(method, step, base, True, RHO_PRIVATE)
    e_s = by_hand_offsets(method, step, base, False, RHO_SHARED)
    if mode is SamMode.JOINT:
        applied = at(moved(point, {**e_p, **e_s}))
    else:
        h_s, h_p = at(moved(point, e_s)), at(moved(point, e_p))
        applied = {n: (h_p if is_private(method, n) else h_s)[n] for n in base}
    out = {n: p.clone() for n, p in params.items()}
    out[ROWS] = params[ROWS] - method.learning_rate(ROWS) * applied[ROWS]
    for name, value in per_user.items():
        out[name][step.users] = value - method.learning_rate(name) * applied[name]
    return out, base, applied


def optimiser_update(method, params, step, mode: SamMode):
    """What SAM (``mode``) applies, with the training loop's gradient function; also the
    number of gradient evaluations it took."""
    params = {n: p.clone() for n, p in params.items()}
    (phase,) = method.stages()[0].phases
    gradients = _gradient_fn(method, params, step, phase, layout(method).rows)
    calls = []

    def counted(offsets):
        calls.append(offsets)
        return gradients(offsets)

    optimizer = local_optimizer(method, method.config.replace(sam_mode=mode))
    assert isinstance(optimizer, SAM) and optimizer.mode is mode
    optimizer.step(params, step, counted)
    return params, len(calls)


# ------------------------------------------------------------------- tests
@pytest.mark.parametrize("name", ["fedrecgel", "fedncf", "fedmf"])
@pytest.mark.parametrize("mode", [SamMode.JOINT, SamMode.HIERARCHICAL])
def test_sam_applies_the_gradients_of_its_equations(name, mode):
    method = small_method(name)
    params, step = a_step(method)
    expected, _, _ = expected_update(method, params, step, mode)
    got, evaluations = optimiser_update(method, params, step, mode)
    assert evaluations == (2 if mode is SamMode.JOINT else 3)
    for n in params:
        assert not torch.equal(got[n], params[n]), n  # the step moved every parameter
        assert got[n] == pytest.approx(expected[n], rel=1e-4, abs=1e-6), n


@pytest.mark.parametrize("name", ["fedrecgel", "fedmf"])
def test_hierarchical_differs_from_joint_in_both_groups(name):
    """Each group's SAM gradient is taken at a different point: in joint mode the other
    group is perturbed too."""
    method = small_method(name)
    params, step = a_step(method)
    _, _, joint = expected_update(method, params, step, SamMode.JOINT)
    _, _, hierarchical = expected_update(method, params, step, SamMode.HIERARCHICAL)
    for private in (True, False):
        names = [n for n in joint if is_private(method, n) == private]
        difference = sum(float((joint[n] - hierarchical[n]).abs().max()) for n in names)
        assert difference > 1e-4, (private, names)


def test_hierarchical_with_a_zero_radius_keeps_that_groups_base_gradient():
    method = small_method("fedncf")
    params, step = a_step(method)
    roles = method.roles()
    sgd = SGD({n: method.learning_rate(n) for n in roles}, layout(method).rows)
    (phase,) = method.stages()[0].phases
    for rho_private, rho_shared in ((RHO_PRIVATE, 0.0), (0.0, RHO_SHARED)):
        work = {n: p.clone() for n, p in params.items()}
        gradients = _gradient_fn(method, work, step, phase, layout(method).rows)
        calls = []

        def counted(offsets, gradients=gradients, calls=calls):
            calls.append(offsets)
            return gradients(offsets)

        sam = SAM(sgd, roles, rho_private, rho_shared, SamMode.HIERARCHICAL)
        sam.step(work, step, counted)
        assert len(calls) == 2
        perturbed = "private" if rho_private > 0 else "shared"
        assert {sam.group(n) for n in calls[1]} == {perturbed}
        # The unperturbed group stepped with its base gradient: as plain SGD would.
        plain = {n: p.clone() for n, p in params.items()}
        sgd.step(plain, step, _gradient_fn(method, plain, step, phase, layout(method).rows))
        for n in params:
            same = torch.equal(work[n], plain[n])
            assert same == (sam.group(n) != perturbed), n


def test_joint_is_the_default_mode_and_unchanged():
    """The default mode is joint, and it takes exactly one gradient at the point where
    both groups are moved: the optimiser's own result equals the explicit joint one bit
    for bit."""
    method = small_method("fedncf")
    assert method.config.group(SamKeys).sam_mode == SamMode.JOINT
    params, step = a_step(method)
    roles = method.roles()
    sgd = SGD({n: method.learning_rate(n) for n in roles}, layout(method).rows)
    default = local_optimizer(method, method.config)
    assert default.mode is SamMode.JOINT
    (phase,) = method.stages()[0].phases

    by_default = {n: p.clone() for n, p in params.items()}
    default.step(by_default, step, _gradient_fn(method, by_default, step, phase))

    explicit = {n: p.clone() for n, p in params.items()}
    gradients = _gradient_fn(method, explicit, step, phase)
    base, _ = gradients(None)
    at_both, _ = gradients(SAM(sgd, roles, RHO_PRIVATE, RHO_SHARED).perturbation(step, base))
    sgd.apply(explicit, step, at_both)
    for n in params:
        assert torch.equal(by_default[n], explicit[n]), n


def test_sam_mode_is_checked():
    with pytest.raises(ValueError, match="hierarchical"):
        small_method("fedncf", sam_mode="layered").config.validate()
