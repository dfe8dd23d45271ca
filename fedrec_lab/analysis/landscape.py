"""``fedrec analyze sharpness``: one run's flatness at its best round, as a JSON record and a
plot.

Per run: the generalization gap of every user (:mod:`fedrec_flwr.node.losses`, the node's
own ``eval-loss`` computation, at the best round's model) and, per sampled user, the measures
of :mod:`fedrec_lab.analysis.sharpness`. The radii of the rho-sharpness are SAM's: the run's
own when it trains with SAM, else those given (the SAM table gives each pair its SAM run's).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedrec_flwr.methods.capabilities import eval_chunk
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.node.losses import user_losses
from fedrec_flwr.node.optim import SamKeys
from fedrec_lab.analysis.sharpness import PROFILE_STEPS, measure_user, sample_users
from fedrec_lab.analysis.state import BestState

#: Users whose sharpness is measured (each a power iteration and an ascent), per run.
USERS = 32


def all_user_losses(best: BestState) -> dict[str, np.ndarray]:
    """``users``, ``fit`` and ``val`` of every user at the best round (float64)."""
    ids, fits, vals = [], [], []
    with torch.no_grad():
        for runtime, state in best.nodes:
            chunk = eval_chunk(runtime.method)
            for lo in range(0, len(runtime.users), chunk):
                positions = np.arange(lo, min(lo + chunk, len(runtime.users)))
                index = torch.from_numpy(positions)
                params = {k: v[index] for k, v in state.private.items()}
                for name in layout(runtime.method).shared_dense:
                    value = torch.from_numpy(np.asarray(best.dense[name], np.float32))
                    params[name] = value.unsqueeze(0).expand(len(positions), *value.shape)
                fit, val = user_losses(
                    runtime.method,
                    best.prepared,
                    best.config.training.seed,
                    best.config.training.num_negatives,
                    params,
                    state.personal,
                    state.private_rows,
                    positions,
                    runtime.users[positions],
                    None,
                    best.eval_table,
                )
                ids.append(runtime.users[positions])
                fits.append(fit)
                vals.append(val)
    users = np.concatenate(ids)
    order = np.argsort(users)
    return {
        "users": users[order],
        "fit": np.concatenate(fits)[order],
        "val": np.concatenate(vals)[order],
    }


def radii_of(best: BestState, given: dict[str, float] | None) -> dict[str, float]:
    """The rho-sharpness radii: ``given``, else the run's own SAM radii."""
    if given is not None:
        return dict(given)
    sam = best.config.group(SamKeys)
    own = {"private": sam.sam_rho_private, "shared": sam.sam_rho_shared}
    if own["private"] <= 0 and own["shared"] <= 0:
        raise ValueError(
            f"{best.run_dir.name} trains without SAM: give the radii to measure at "
            "(--rho-private, --rho-shared; the SAM table takes its SAM twin's)"
        )
    return own


def _round(values: np.ndarray, digits: int = 6) -> list[float]:
    return [float(f"{v:.{digits}g}") for v in np.asarray(values, dtype=np.float64)]


def analyze(
    best: BestState,
    radii: dict[str, float] | None = None,
    users: int = USERS,
    iterations: int = 20,
    steps: int = 3,
) -> dict[str, Any]:
    """The run's record: its gap per user, its sampled users' measures, their means."""
    started = time.time()
    radii = radii_of(best, radii)
    losses = all_user_losses(best)
    measured = [
        measure_user(best, int(u), radii, iterations, steps)
        for u in sample_users(best.prepared.num_users, users)
    ]
    gap = losses["val"] - losses["fit"]
    sam = best.config.group(SamKeys)
    means = {
        name: float(np.mean([m[name] for m in measured]))
        for name in ("lambda_max", "rho_sharpness", "rho_sharpness_first_step", "loss")
    }
    return {
        "run": best.run_dir.name,
        "method": best.config.method_name,
        "dataset": best.config.data.dataset,
        "protocol": best.config.training.protocol,
        "seed": best.config.training.seed,
        "best_round": best.round,
        "sam": [sam.sam_rho_private, sam.sam_rho_shared],
        "radii": [radii["private"], radii["shared"]],
        "fit_loss": float(losses["fit"].mean()),
        "val_loss": float(losses["val"].mean()),
        "gap": float(gap.mean()),
        **{f"mean_{k}": v for k, v in means.items()},
        "median_lambda_max": float(np.median([m["lambda_max"] for m in measured])),
        "profile_steps": _round(PROFILE_STEPS),
        "profile_top": _round(np.mean([m["profile_top"] for m in measured], axis=0)),
        "profile_random": _round(np.mean([m["profile_random"] for m in measured], axis=0)),
        "users": [int(u) for u in losses["users"]],
        "user_gap": _round(gap),
        "sampled": [{k: v for k, v in m.items() if not k.startswith("profile")} for m in measured],
        "seconds": round(time.time() - started, 1),
    }


def write_record(record: dict[str, Any], out: Path) -> Path:
    """``<out>/<run>.json``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{record['run']}.json"
    path.write_text(json.dumps(record) + "\n")
    return path


def write(record: dict[str, Any], out: Path) -> Path:
    """``<out>/<run>.json`` and its plot, ``<out>/<run>.png``."""
    path = write_record(record, out)
    plot(record, out / f"{record['run']}.png")
    return path


def plot(record: dict[str, Any], path: Path) -> None:
    """Per-user top eigenvalues (histogram) and the mean loss profiles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    left.hist([m["lambda_max"] for m in record["sampled"]], bins=20)
    left.set_xlabel("top Hessian eigenvalue of the local loss")
    left.set_ylabel("users")
    radius = float(np.hypot(*record["radii"]))
    steps = np.asarray(record["profile_steps"]) * radius
    right.plot(steps, record["profile_top"], label="top eigenvector")
    right.plot(steps, record["profile_random"], label="random direction")
    right.set_xlabel("distance from the best round's model")
    right.set_ylabel("mean loss increase")
    right.legend(fontsize=8)
    fig.suptitle(
        f"{record['run']}: round {record['best_round']}, mean lambda_max "
        f"{record['mean_lambda_max']:.3g}, rho-sharpness {record['mean_rho_sharpness']:.3g}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
