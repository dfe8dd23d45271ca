"""Local differential privacy on a user's uploaded item rows (plain NumPy).

A user's upload row for item ``i`` is ``g_i + delta_i`` (``g_i``: the global row it was sent,
``delta_i``: its local change). With ``ldp-mechanism`` ``laplace`` or ``gaussian`` each row's
change is first clipped to L2 norm ``C`` (``ldp-clip``), then noise is added to every
coordinate of every uploaded row (decoy rows included, whose change is zero):

- two clipped changes differ by at most ``2C`` in L2 norm, hence by at most ``2C sqrt(d)`` in
  L1 norm (``d``: the row width);
- Laplace: ``b = 2 C sqrt(d) / epsilon`` per coordinate (epsilon-LDP per row);
- Gaussian: ``sigma = 2 C sqrt(2 ln(1.25 / delta)) / epsilon`` per coordinate
  ((epsilon, delta)-LDP per row, the classic bound, valid for epsilon <= 1; above 1 it is the
  customary calibration, reported as such).

The guarantee is per row and per round: an upload of ``k`` rows is ``k epsilon``-LDP by basic
composition, and rounds compose again. PFedRec's Table 4 mode (``ldp-laplace-lambda``) adds
``Laplace(0, lambda)`` to the uploaded rows with no clipping, as the paper did; it carries
no formal epsilon.
"""

from __future__ import annotations

import math
from enum import StrEnum

import numpy as np

from fedrec_flwr.schema import NON_NEGATIVE, POSITIVE, ConfigError, Group, Range, RunValues, key


class Mechanism(StrEnum):
    """``ldp-mechanism``: the noise added to each uploaded row's clipped change."""

    NONE = "none"
    LAPLACE = "laplace"
    GAUSSIAN = "gaussian"


MECHANISMS = tuple(mechanism.value for mechanism in Mechanism)


def check_ldp(config: RunValues) -> None:
    """The two LDP modes exclude each other; denoising needs one of them."""
    keys = config.group(LdpKeys)
    if keys.ldp_laplace_lambda > 0 and keys.ldp_mechanism != Mechanism.NONE:
        raise ConfigError(
            "ldp-laplace-lambda (raw noise, no clipping) and ldp-mechanism (clipped, "
            "calibrated to ldp-epsilon) are two alternatives: set one, leave the other off."
        )
    if keys.ldp_denoise and keys.ldp_mechanism == Mechanism.NONE and not keys.ldp_laplace_lambda:
        raise ConfigError(
            "ldp-denoise shrinks the LDP noise out of the aggregate: it needs ldp-mechanism "
            "or ldp-laplace-lambda set (or set ldp-denoise = false)."
        )


class LdpKeys(Group):
    title = "LDP (plug-in)"
    plugin = "ldp"
    check = check_ldp

    ldp_mechanism: str = key(
        default=Mechanism.NONE.value,
        help="LDP on each user's uploaded rows: `none`, `laplace` or `gaussian`: the row's "
        "change is clipped to `ldp-clip`, then noise of scale `2C sqrt(d)/eps` (Laplace) or "
        "`2C sqrt(2 ln(1.25/delta))/eps` (Gaussian) is added to every coordinate",
        choices=Mechanism,
    )
    ldp_epsilon: float = key(default=1.0, help="epsilon per uploaded row and round", range=POSITIVE)
    ldp_delta: float = key(
        default=1e-5,
        help="delta of the Gaussian mechanism",
        range=Range(0, 1, low_included=False, high_included=False),
        why=" (the Gaussian mechanism's delta; e.g. 1e-5, below 1 / number of users)",
    )
    ldp_clip: float = key(
        default=1.0, help="L2 bound `C` of a row's change before the noise", range=POSITIVE
    )
    ldp_laplace_lambda: float = key(
        default=0.0,
        help="PFedRec Table 4's LDP: `Laplace(0, lambda)` on the uploaded rows, no clipping, "
        "no formal epsilon (0 = off; not with `ldp-mechanism`)",
        range=NON_NEGATIVE,
        why=" (PFedRec Table 4's raw Laplace scale, 0 = off)",
    )
    ldp_denoise: bool = key(
        default=False,
        help="the server shrinks each aggregated row change by the James-Stein factor of the "
        "known noise variance (post-processing, no privacy cost)",
    )


def noise_scale(mechanism: str, epsilon: float, delta: float, clip: float, dim: int) -> float:
    """Per-coordinate noise scale: Laplace ``b`` or Gaussian ``sigma`` (formulas above)."""
    if mechanism == "laplace":
        return 2.0 * clip * math.sqrt(dim) / epsilon
    if mechanism == "gaussian":
        return 2.0 * clip * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    raise ValueError(f"no noise scale for ldp-mechanism '{mechanism}'")


def clip_rows(changes: np.ndarray, clip: float) -> np.ndarray:
    """Each row scaled down to L2 norm ``clip`` if it is longer (float64)."""
    changes = np.asarray(changes, dtype=np.float64)
    norms = np.linalg.norm(changes, axis=1, keepdims=True)
    return changes * np.minimum(1.0, clip / np.maximum(norms, 1e-300))


def privatize(
    sent: np.ndarray,
    tuned: np.ndarray,
    rng: np.random.Generator,
    mechanism: str,
    epsilon: float,
    delta: float,
    clip: float,
    laplace_lambda: float,
) -> np.ndarray:
    """The rows a user uploads (float32) from the rows it was sent and its tuned rows.

    ``laplace_lambda > 0``: ``tuned + Laplace(0, lambda)`` (PFedRec Table 4); else
    ``mechanism`` ``laplace``/``gaussian``: ``sent + clip(tuned - sent) + noise``; ``none``
    with no lambda: ``tuned`` unchanged.
    """
    if laplace_lambda > 0:
        noise = rng.laplace(0.0, laplace_lambda, size=tuned.shape)
        return (tuned.astype(np.float64) + noise).astype(np.float32)
    if mechanism == "none":
        return tuned
    base = sent.astype(np.float64)
    clipped = clip_rows(tuned.astype(np.float64) - base, clip)
    scale = noise_scale(mechanism, epsilon, delta, clip, tuned.shape[1])
    if mechanism == "laplace":
        noise = rng.laplace(0.0, scale, size=tuned.shape)
    else:
        noise = rng.normal(0.0, scale, size=tuned.shape)
    return (base + clipped + noise).astype(np.float32)
