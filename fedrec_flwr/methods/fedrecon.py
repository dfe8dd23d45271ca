"""FedRecon (Singhal et al., NeurIPS 2021): federated reconstruction of the user vector.

FedMF whose user vector is not kept between rounds: each round the user draws a fresh vector
(keyed by (seed, user, round)), reconstructs it on its data with the item rows frozen
(``fedrecon-epochs`` epochs, learning rate ``lr``), then updates the item rows with the vector
frozen (``local-epochs`` epochs) and uploads them. Evaluation scores with the vector
reconstructed in the user's latest training round. Under ``personalization = "dual"`` the
user also keeps the item rows it post-tuned and evaluates with them.
"""

from __future__ import annotations

import numpy as np
import torch

from fedrec_flwr.methods.base import ROWS, Phase, RoundContext, Stage
from fedrec_flwr.methods.card import INIT_STD, ITEM_LR, LR, NEGATIVES, MethodCard
from fedrec_flwr.methods.fedmf import USER, FedMF
from fedrec_flwr.schema import POSITIVE, Group, key
from fedrec_flwr.seeding import keyed_rng


class FedReconKeys(Group):
    title = "FedRecon"

    fedrecon_epochs: int = key(
        default=5,
        help="epochs that reconstruct the user vector (items frozen) before the item epochs",
        range=POSITIVE,
    )


class FedRecon(FedMF):
    name = "fedrecon"

    def stages(self) -> tuple[Stage, ...]:
        return (
            Stage(
                "reconstruct",
                (Phase("user", (USER,)),),
                self.config.group(FedReconKeys).fedrecon_epochs,
                logged=False,
            ),
            Stage("items", (Phase("items", (ROWS,)),), self.config.training.local_epochs),
        )

    def begin_local_update(self, params: dict[str, torch.Tensor], context: RoundContext) -> None:
        """Forget the user vectors: a fresh N(0, init-std^2) draw per (seed, user, round)."""
        seed, server_round = self.config.training.seed, context.server_round
        fresh = [
            keyed_rng(seed, "reconstruct-init", int(u), server_round).normal(
                0.0, self.config.learning.init_std, size=self.dim
            )
            for u in context.users
        ]
        if fresh:
            params[USER].copy_(torch.from_numpy(np.stack(fresh).astype(np.float32)))


CARD = MethodCard(
    FedRecon,
    title="FedRecon",
    paper="Singhal et al., NeurIPS 2021",
    keys=FedReconKeys,
    search_space={"lr": LR, "item-lr": ITEM_LR, "init-std": INIT_STD, "num-negatives": NEGATIVES},
    audit=None,  # the audit imitates FedMF's joint step, not the reconstruction
    supports_dual=True,
    order=4,
)
