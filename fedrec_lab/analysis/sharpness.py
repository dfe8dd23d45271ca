"""How sharp a run's model is at its best round: per sampled user, the top eigenvalue of the
Hessian of its local loss and the worst-case loss increase within a SAM ball.

The local loss of user ``u`` is the loss its local update minimises (the method's own
``loss``: the mean BCE over its samples, plus the method's terms), on the samples of its next
round (its train positives and ``num-negatives`` fresh negatives per positive, drawn as
training draws them, keyed by (seed, user, best round + 1)), as a function of every
parameter its local update trains: its private parameters, its rows of those items (its
personal rows where it holds them, else the global rows evaluation read), its private rows
and the shared-dense parameters. It is evaluated at the model the user evaluated with at the
best round (:mod:`fedrec_lab.analysis.state`).

- ``lambda_max``: the largest eigenvalue of that loss's Hessian by power iteration on
  Hessian-vector products (double backward), from a start keyed by (seed, user); the
  Rayleigh quotient of the last iterate (the eigenvalue of largest magnitude: a negative
  one would show, none did where measured).
- ``rho-sharpness``: ``max L(theta + eps) - L(theta)`` over the perturbations SAM makes, each
  group (private: private parameters and rows; shared: item rows and shared-dense
  parameters) on a sphere of its own radius, as ``sam-rho-private`` / ``sam-rho-shared``:
  the first iterate is SAM's own point ``rho g / ||g||``, each next one ``rho`` times the
  normalised gradient at the previous point (gradient ascent on the spheres); the maximum
  over the iterates, a lower bound of the worst case.
- ``profile``: the loss increase along the top eigenvector and along a random direction
  (keyed), each signed to ascend (non-negative slope at the model), at multiples of the
  radius, for the landscape plot.

Users: a fixed keyed sample (``keyed_rng(0, "sharpness-users")``), the same in every run of a
dataset and protocol, so that runs are compared on the same users (paired).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fedrec_flwr.methods.base import ROW_ROLES, ROWS, Role, Step
from fedrec_flwr.node.samples import build_round_samples
from fedrec_flwr.node.scoring import user_rows
from fedrec_flwr.seeding import keyed_rng
from fedrec_lab.analysis.state import BestState

PRIVATE_ROLES = (Role.PRIVATE, Role.PRIVATE_ROWS)
#: Multiples of the radius the loss profile is taken at.
PROFILE_STEPS = np.linspace(-3.0, 3.0, 13)


def sample_users(num_users: int, count: int) -> np.ndarray:
    """The users every sharpness measurement of a dataset takes (sorted)."""
    order = keyed_rng(0, "sharpness-users").permutation(num_users)
    return np.sort(order[: min(count, num_users)])


@dataclass
class LocalLoss:
    """One user's local loss as a function of its trainable parameters."""

    names: list[str]
    groups: list[str]  # "private" or "shared", per name
    theta: list[torch.Tensor]  # the values at the model (leaves, float64 copies)
    fn: Callable[[list[torch.Tensor]], torch.Tensor]

    def value(self, offsets: list[torch.Tensor] | None = None) -> torch.Tensor:
        if offsets is None:
            return self.fn(self.theta)
        return self.fn([t + o for t, o in zip(self.theta, offsets, strict=True)])

    def gradient(self, offsets: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        point = [
            (t if offsets is None else t + o).detach().requires_grad_(True)
            for t, o in zip(self.theta, offsets or self.theta, strict=True)
        ]
        with torch.enable_grad():
            return list(torch.autograd.grad(self.fn(point), point))


def local_loss(best: BestState, user: int) -> LocalLoss:
    """User ``user``'s :class:`LocalLoss` at the best round's model."""
    runtime, state, position = best.node_of(user)
    method, config = runtime.method, best.config
    samples = build_round_samples(
        best.prepared, config, np.array([user]), np.array([position]), best.round + 1
    )
    items = samples.row_items[None, :]
    rows, extras = user_rows(
        method,
        state.personal,
        state.private_rows,
        np.array([position]),
        items,
        None,
        best.eval_table,
    )
    roles = method.roles()
    trained = {n for stage in method.stages() for phase in stage.phases for n in phase.params}
    values: dict[str, torch.Tensor] = {ROWS: torch.from_numpy(rows[0])}
    values.update({n: torch.from_numpy(v[0]) for n, v in extras.items()})
    for name, tensor in state.private.items():
        values[name] = tensor[position : position + 1].clone()
    for name, value in best.dense.items():
        if name in roles:
            values[name] = torch.from_numpy(np.asarray(value, np.float32)).unsqueeze(0)
    names = sorted(n for n in trained if n in values and roles.get(n) is not Role.GLOBAL_ROWS)
    fixed = {n: v for n, v in values.items() if n not in names}
    row_names = {n for n, r in roles.items() if r in ROW_ROLES}
    count = len(samples.sample_rows)
    index = torch.from_numpy(samples.sample_rows)
    step = Step(
        users=torch.zeros(1, dtype=torch.long),
        rows=index[None],
        labels=torch.from_numpy(np.asarray(samples.sample_labels, np.float32))[None].double(),
        weights=torch.full((1, count), 1.0 / count, dtype=torch.float64),
    )

    def fn(theta: list[torch.Tensor]) -> torch.Tensor:
        params = {**fixed, **dict(zip(names, theta, strict=True))}
        gathered = {
            n: (v.index_select(0, index)[None] if n in row_names else v)
            for n, v in params.items()
            if n != ROWS
        }
        table = params[ROWS].index_select(0, index)[None]
        gathered = {n: v.double() for n, v in gathered.items()}
        logits = method.logits(gathered, table.double())
        return method.loss(step, gathered, table.double(), logits)

    groups = ["private" if roles[n] in PRIVATE_ROLES else "shared" for n in names]
    theta = [values[n].detach().double() for n in names]
    return LocalLoss(names, groups, theta, fn)


def _dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    return float(sum((x * y).sum() for x, y in zip(a, b, strict=True)))


def _normalised(v: list[torch.Tensor]) -> list[torch.Tensor]:
    norm = _dot(v, v) ** 0.5
    return [x / max(norm, 1e-300) for x in v]


def top_eigen(
    loss: LocalLoss, rng: np.random.Generator, iterations: int = 30, tol: float = 1e-4
) -> tuple[float, list[torch.Tensor], int]:
    """(eigenvalue, eigenvector, iterations run) of the Hessian's top eigenpair."""
    point = [t.detach().requires_grad_(True) for t in loss.theta]
    with torch.enable_grad():
        grads = torch.autograd.grad(loss.fn(point), point, create_graph=True)
        v = _normalised([torch.from_numpy(rng.standard_normal(t.shape)) for t in point])
        value, done = 0.0, 0
        for done in range(1, iterations + 1):
            hv = torch.autograd.grad(grads, point, grad_outputs=v, retain_graph=True)
            new = _dot(v, hv)
            v = _normalised([h.detach() for h in hv])
            if done > 1 and abs(new - value) <= tol * max(abs(new), 1e-12):
                value = new
                break
            value = new
    return value, v, done


def rho_sharpness(loss: LocalLoss, radii: dict[str, float], steps: int = 5) -> tuple[float, float]:
    """(worst loss increase over the ascent iterates, the increase at SAM's own point)."""
    base = float(loss.value())
    grad = loss.gradient()
    worst, first = float("-inf"), float("nan")
    for step in range(steps):
        offsets = []
        for group in ("private", "shared"):
            members = [i for i, g in enumerate(loss.groups) if g == group]
            norm = sum(float(grad[i].pow(2).sum()) for i in members) ** 0.5
            for i in members:
                scale = radii[group] / max(norm, 1e-300) if radii[group] > 0 else 0.0
                offsets.append((i, grad[i] * scale))
        ordered = [o for _, o in sorted(offsets, key=lambda pair: pair[0])]
        increase = float(loss.value(ordered)) - base
        first = increase if step == 0 else first
        worst = max(worst, increase)
        grad = loss.gradient(ordered)
    return worst, first


def profile(loss: LocalLoss, direction: list[torch.Tensor], radius: float) -> list[float]:
    """Loss increase at ``theta + t * radius * direction`` for t in :data:`PROFILE_STEPS`."""
    base = float(loss.value())
    unit = _normalised(direction)
    return [float(loss.value([float(t) * radius * d for d in unit])) - base for t in PROFILE_STEPS]


def measure_user(
    best: BestState, user: int, radii: dict[str, float], iterations: int = 30, steps: int = 5
) -> dict:
    """Every measure of one user (floats; the profiles as lists)."""
    loss = local_loss(best, user)
    rng = keyed_rng(best.config.training.seed, "sharpness-start", user)
    value, vector, done = top_eigen(loss, rng, iterations)
    worst, first = rho_sharpness(loss, radii, steps)
    radius = (radii["private"] ** 2 + radii["shared"] ** 2) ** 0.5
    random = [torch.from_numpy(rng.standard_normal(t.shape)) for t in loss.theta]
    grad = loss.gradient()  # each direction signed to ascend: the profiles align across users
    vector = vector if _dot(vector, grad) >= 0 else [-x for x in vector]
    random = random if _dot(random, grad) >= 0 else [-x for x in random]
    return {
        "user": int(user),
        "loss": float(loss.value()),
        "lambda_max": value,
        "power_iterations": done,
        "rho_sharpness": worst,
        "rho_sharpness_first_step": first,
        "parameters": int(sum(t.numel() for t in loss.theta)),
        "profile_top": profile(loss, vector, radius),
        "profile_random": profile(loss, random, radius),
    }
