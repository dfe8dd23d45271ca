"""What one user uploads: its tuned rows, its decoy rows, under LDP (plain NumPy): the decoy
and LDP stages of a node's upload chain (:mod:`fedrec_flwr.stages`), and the plug-ins that
declare them.

Each stage works on every user's upload on its own, before the node sums its users' rows,
so that clipping, noise and decoys are per user, as if each user were its own node
(faithful mode).

Why the aggregate is unbiased. The server's ``round-mean`` rule moves row ``i`` by the sum
of the uploaders' changes ``(uploaded row - global row)`` divided by the number of users in
the round, which does not depend on how many users uploaded row ``i``. A decoy row is the
global row plus zero-mean noise: with noise off it adds exactly zero change (the table is
the same up to float64 rounding), with noise on it adds zero-mean noise (variance, no bias).
``toucher-mean`` divides by the number of uploaders of the row, which decoys would inflate
(shrinking every step of the rows they hit) without the server being able to tell them
apart, so the configuration refuses decoys with it. Clipping is the one bias LDP brings:
changes longer than ``ldp-clip`` are shortened, as in DP-SGD. Decoys trained with the
user's samples (``decoy-updates``) are already among its tuned rows: they upload a real
change, and bias the aggregate as extra training samples would (see
:mod:`fedrec_flwr.privacy.decoys`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fedrec_flwr.methods import Method, Plugin
from fedrec_flwr.methods.layout import layout
from fedrec_flwr.privacy.decoys import DecoyKeys, UserItems, user_decoys
from fedrec_flwr.privacy.denoise import Denoise
from fedrec_flwr.privacy.ldp import LdpKeys, Mechanism, privatize
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import ConfigError
from fedrec_flwr.seeding import keyed_rng
from fedrec_flwr.stages import UploadRound, Uploads, UploadStage

#: Called with (user, round, items, uploaded rows, sent rows) of every user upload a node
#: builds while it is set: the privacy audit's view of one user's upload (faithful mode).
Observer = Callable[[int, int, np.ndarray, np.ndarray, np.ndarray], None]
OBSERVERS: list[Observer] = []


def ldp_enabled(config: RunGroups) -> bool:
    """Is LDP on: a mechanism, or PFedRec's raw Laplace scale?"""
    ldp = config.group(LdpKeys)
    return ldp.ldp_mechanism != Mechanism.NONE or ldp.ldp_laplace_lambda > 0


def decoys_enabled(config: RunGroups) -> bool:
    """Are there decoy rows: a positive ratio?"""
    return config.group(DecoyKeys).decoy_ratio > 0


def privacy_active(config: RunGroups) -> bool:
    """Does the configuration change what a user uploads (LDP or decoys)?"""
    return ldp_enabled(config) or decoys_enabled(config)


def with_decoys(prepared: UserItems, config: RunGroups, user: int, items: np.ndarray) -> np.ndarray:
    """The sorted rows a user requests: ``items`` (what it trains) and its decoys."""
    decoys = user_decoys(prepared, config, user)
    return np.union1d(items, decoys).astype(np.int64) if len(decoys) else items


def per_user(
    uploads: Uploads, step: Callable[[int, np.ndarray, np.ndarray, np.ndarray], tuple]
) -> Uploads:
    """``uploads`` with each user's block ``(items, rows, sent)`` replaced by
    ``step(user, items, rows, sent)``'s, user after user; rows become float32."""
    rows, sent = uploads.host_rows(), uploads.host_sent()
    offsets, items_out, rows_out, sent_out = [0], [], [], []
    for user, lo, hi in uploads.blocks():
        items, block, base = step(user, uploads.items[lo:hi], rows[lo:hi], sent[lo:hi])
        items_out.append(items)
        rows_out.append(block)
        sent_out.append(base)
        offsets.append(offsets[-1] + len(items))
    if not items_out:
        return uploads
    return uploads.replace(
        offsets=np.asarray(offsets, dtype=np.int64),
        items=np.concatenate(items_out),
        rows=torch.from_numpy(np.concatenate(rows_out).astype(np.float32)),
        sent=torch.from_numpy(np.concatenate(sent_out)),
    )


class DecoyRows(UploadStage):
    """Each user requests its decoys every round and uploads their rows as it was sent them
    (a zero change; noised by LDP after it, like every row)."""

    name = "decoys"
    reads_sent = True

    def __init__(self, config: RunGroups, data: UserItems) -> None:
        self.config, self.data = config, data

    def request(self, user: int, items: np.ndarray) -> np.ndarray:
        return with_decoys(self.data, self.config, user, items)

    def transform(self, uploads: Uploads, upload_round: UploadRound) -> Uploads:
        def step(user, items, rows, base):
            decoys = np.setdiff1d(user_decoys(self.data, self.config, user), items)
            if not len(decoys):
                return items, rows, base
            decoy_rows = upload_round.lookup(decoys)
            order = np.argsort(np.r_[items, decoys], kind="stable")
            return (
                np.r_[items, decoys][order],
                np.concatenate([rows, decoy_rows])[order],
                np.concatenate([base, decoy_rows])[order],
            )

        return per_user(uploads, step)


class LocalDP(UploadStage):
    """Each user's uploaded rows privatized (:func:`~fedrec_flwr.privacy.ldp.privatize`,
    noise keyed by (seed, user, round)), with the explicit arguments of the LDP keys."""

    name = "ldp"
    reads_sent = True

    def __init__(
        self,
        seed: int,
        mechanism: str,
        epsilon: float,
        delta: float,
        clip: float,
        laplace_lambda: float,
    ) -> None:
        if laplace_lambda < 0 or clip <= 0 or epsilon <= 0 or not 0 < delta < 1:
            raise ValueError(
                "LDP needs ldp-laplace-lambda >= 0, ldp-clip > 0, ldp-epsilon > 0 and "
                f"ldp-delta in (0, 1), not {laplace_lambda}, {clip}, {epsilon}, {delta}"
            )
        self.seed = seed
        self.mechanism = Mechanism(mechanism)
        self.epsilon, self.delta, self.clip = epsilon, delta, clip
        self.laplace_lambda = laplace_lambda

    @classmethod
    def of(cls, config: RunGroups, data: object = None) -> LocalDP:
        ldp = config.group(LdpKeys)
        return cls(
            config.training.seed,
            ldp.ldp_mechanism,
            ldp.ldp_epsilon,
            ldp.ldp_delta,
            ldp.ldp_clip,
            ldp.ldp_laplace_lambda,
        )

    def transform(self, uploads: Uploads, upload_round: UploadRound) -> Uploads:
        def step(user, items, rows, base):
            rng = keyed_rng(self.seed, "ldp-noise", user, upload_round.server_round)
            noised = privatize(
                base,
                rows,
                rng,
                self.mechanism,
                self.epsilon,
                self.delta,
                self.clip,
                self.laplace_lambda,
            )
            return items, noised, base

        return per_user(uploads, step)


class ObservedUploads(UploadStage):
    """Shows each user's upload to the :data:`OBSERVERS` (the privacy audit), changing
    nothing; a node's chain ends its transforms with it."""

    name = "observers"

    @property
    def reads_sent(self) -> bool:  # type: ignore[override]
        return bool(OBSERVERS)

    def transform(self, uploads: Uploads, upload_round: UploadRound) -> Uploads:
        if not OBSERVERS:
            return uploads

        def step(user, items, rows, base):
            for observer in OBSERVERS:
                observer(user, upload_round.server_round, items, rows, base)
            return items, rows, base

        return per_user(uploads, step)


def ldp_applies(config: RunGroups, method: Method) -> None:
    """LDP clips and noises item rows only: a method that uploads shared-dense parameters
    (FedNCF's MLP, outside DualPer) would send them in the clear, so it is refused."""
    dense = layout(method).shared_dense
    if dense:
        raise ConfigError(
            f"LDP noises the uploaded item rows, but method '{method.name}' also uploads the "
            f"shared-dense parameters {', '.join(dense)}, which LDP does not clip or noise: "
            "use a method without shared-dense parameters (or personalization='dual', which "
            "keeps them on the device), or set ldp-mechanism='none' and ldp-laplace-lambda=0."
        )


def denoising(config: RunGroups, method: Method, num_items: int) -> Denoise | None:
    """The server's denoising stage under ``ldp-denoise``, else None."""
    return Denoise.of(config, num_items) if config.group(LdpKeys).ldp_denoise else None


#: A fixed set of never-interacted rows per user, requested and uploaded beside its real
#: rows.
DECOYS = Plugin(
    name="decoys",
    paper="decoy rows (docs/privacy.md)",
    enabled=decoys_enabled,
    node=DecoyRows,
    keys=(DecoyKeys,),
)
#: Clipped Laplace or Gaussian noise on each uploaded row, or PFedRec Table 4's raw Laplace,
#: and the server's optional denoising; refused for methods with shared-dense parameters.
LDP = Plugin(
    name="ldp",
    paper="Laplace and Gaussian mechanisms; PFedRec Table 4",
    enabled=ldp_enabled,
    check=ldp_applies,
    node=LocalDP.of,
    server=denoising,
    keys=(LdpKeys,),
)
