"""FedNCF: NeuMF (He et al., WWW 2017) trained federatedly, and FedRecGEL on top of it.

An item row is ``[GMF part (embedding-dim) | MLP part (ncf-mlp-dim)]``. Private: the user's
GMF and MLP embeddings. Shared: the item rows, and the MLP tower and output layer (dense,
averaged over the round's users). Score: ``out([p_gmf * q_gmf, MLP([p_mlp, q_mlp])])``.
Under ``personalization = "dual"`` (PFedRec Table 3) the MLP and output layer become private
and the user post-tunes personal item rows that it evaluates with.

FedRecGEL (seeds 000/001) is this model trained with SAM (two radii, ``sam-rho-private`` and
``sam-rho-shared``), one full-batch step per client and round, and the server's Adam on the
mean update (``server-optimizer = "adam"``): see ``conf/fedrecgel-*.toml``. Its reference
code's loss, the sum of the means of 128-sample chunks, is ``fedrecgel-loss-chunk = 128``;
its Adam on the user embeddings, ``fedrecgel-private-optimizer = "adam"``.
"""

from __future__ import annotations

import itertools
import math
from enum import StrEnum

import numpy as np
import torch

from fedrec_flwr.methods.adam_state import adam_state, is_adam_state
from fedrec_flwr.methods.base import Method, Phase, Step, bce_losses, user_normal
from fedrec_flwr.methods.card import INIT_STD, ITEM_LR, LR, MethodCard
from fedrec_flwr.run_keys import RunGroups
from fedrec_flwr.schema import NON_NEGATIVE, POSITIVE, ConfigError, Dim, Group, key
from fedrec_flwr.seeding import keyed_rng

USER_GMF, USER_MLP = "user-gmf", "user-mlp"


def layer_sizes(text: str) -> tuple[int, ...]:
    """``ncf-layers`` as integers (the MLP tower's output sizes), or ConfigError."""
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) <= 0:
        raise ConfigError(
            f"ncf-layers='{text}' must be comma-separated positive layer sizes, "
            "e.g. '32,16' (input: 2 x ncf-mlp-dim)."
        )
    return sizes


#: NeuMF's keys (FedNCF and FedRecGEL).
class NcfKeys(Group):
    title = "FedNCF and FedRecGEL"

    ncf_mlp_dim: int = key(
        default=32,
        help="size of the MLP user and item embeddings (an item row is "
        "`embedding-dim + ncf-mlp-dim` wide)",
        range=POSITIVE,
    )
    ncf_layers: str = key(
        default="32,16",
        help="output sizes of the MLP tower's layers, comma-separated (input: 2 x `ncf-mlp-dim`)",
        check=layer_sizes,
    )
    ncf_dense_init: str = key(
        default="pytorch",
        help="init of the MLP tower and output layer: `pytorch` (nn.Linear's default) or "
        "`reference` (FedRecGEL's reference code: Xavier-uniform tower weights, Kaiming-"
        "uniform output weight with the sigmoid gain, zero biases)",
        choices=lambda: ("pytorch", "reference"),
    )


class FedNCF(Method):
    name = "fedncf"
    eval_chunk = 16  # full ranking builds [users, items, hidden] activations

    def __init__(self, config: RunGroups, num_items: int) -> None:
        super().__init__(config, num_items)
        keys = config.group(NcfKeys)
        self.mlp_dim = keys.ncf_mlp_dim
        self.layers = layer_sizes(keys.ncf_layers)

    @property
    def row_dim(self) -> int:
        return self.dim + self.mlp_dim

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """User GMF and MLP embeddings ~ N(0, init-std^2), keyed by (seed, user)."""
        return {
            USER_GMF: torch.from_numpy(user_normal(self.config, users, self.dim, key=2)),
            USER_MLP: torch.from_numpy(user_normal(self.config, users, self.mlp_dim, key=3)),
        }

    def init_dense(self) -> dict[str, np.ndarray]:
        """MLP tower and output layer, keyed by the seed: nn.Linear's default init, or with
        ``ncf-dense-init = "reference"`` that of FedRecGEL's reference code."""
        sizes = [2 * self.mlp_dim, *self.layers]
        reference = self.config.group(NcfKeys).ncf_dense_init != "pytorch"
        linear = _reference_linear if reference else _linear
        seed = self.config.training.seed
        dense = {}
        for index, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
            dense.update(linear(seed, f"mlp-{index}", fan_in, fan_out, index))
        out = linear(seed, "out", self.dim + sizes[-1], 1, len(self.layers))
        return {
            **dense,
            "out-weight": out["out-weight"][:, 0],
            "out-bias": out["out-bias"],
        }

    def _tower(
        self, params: dict[str, torch.Tensor], hidden: torch.Tensor, in_place: bool = False
    ) -> torch.Tensor:
        """The MLP layers after the first one's pre-activation: [a, k, h0] -> [a, k, h_last].
        ``in_place`` (no autograd; ``hidden`` is the caller's to overwrite): the same
        arithmetic without a new [a, k, h] tensor per operation (full ranking's are large)."""
        if in_place:
            hidden = hidden.relu_()
            for index in range(1, len(self.layers)):
                weight, bias = params[f"mlp-{index}-weight"], params[f"mlp-{index}-bias"]
                hidden = torch.matmul(hidden, weight).add_(bias.unsqueeze(1)).relu_()
            return hidden
        hidden = torch.relu(hidden)
        for index in range(1, len(self.layers)):
            weight, bias = params[f"mlp-{index}-weight"], params[f"mlp-{index}-bias"]
            hidden = torch.relu(torch.matmul(hidden, weight) + bias.unsqueeze(1))
        return hidden

    def _output(
        self, params, gmf: torch.Tensor, hidden: torch.Tensor, in_place: bool = False
    ) -> torch.Tensor:
        weight = params["out-weight"]  # [a, dim + h_last]
        if in_place:  # gmf and hidden are the caller's to overwrite (see _tower)
            out = gmf.mul_(weight[:, None, : self.dim]).sum(-1)
            out = out + hidden.mul_(weight[:, None, self.dim :]).sum(-1)
            return out + params["out-bias"]
        out = (gmf * weight[:, None, : self.dim]).sum(-1)
        out = out + (hidden * weight[:, None, self.dim :]).sum(-1)
        return out + params["out-bias"]  # bias [a, 1] broadcast over the k items

    def logits(self, params: dict[str, torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
        gmf = params[USER_GMF].unsqueeze(1) * rows[..., : self.dim]
        weight0, bias0 = params["mlp-0-weight"], params["mlp-0-bias"]  # [a, 2m, h0], [a, h0]
        user_part = torch.matmul(params[USER_MLP].unsqueeze(1), weight0[:, : self.mlp_dim])
        item_part = torch.matmul(rows[..., self.dim :], weight0[:, self.mlp_dim :])
        hidden = self._tower(params, user_part + item_part + bias0.unsqueeze(1))
        return self._output(params, gmf, hidden)

    def logits_all(self, params: dict[str, torch.Tensor], table: torch.Tensor) -> torch.Tensor:
        """Full ranking; when the tower is shared, the items' first-layer part is computed
        once for all users."""
        weight0, bias0 = params["mlp-0-weight"], params["mlp-0-bias"]
        item_mlp = table[:, self.dim :]
        if self.dual:  # a tower per user
            item_part = torch.matmul(item_mlp, weight0[:, self.mlp_dim :])  # [a, I, h0]
        else:
            item_part = (item_mlp @ weight0[0, self.mlp_dim :]).unsqueeze(0)  # [1, I, h0]
        user_part = torch.matmul(params[USER_MLP].unsqueeze(1), weight0[:, : self.mlp_dim])
        in_place = not torch.is_grad_enabled()  # evaluation: no new tensor per operation
        pre = item_part + user_part
        pre = pre.add_(bias0.unsqueeze(1)) if in_place else pre + bias0.unsqueeze(1)
        hidden = self._tower(params, pre, in_place)
        gmf = params[USER_GMF].unsqueeze(1) * table[:, : self.dim].unsqueeze(0)
        return self._output(params, gmf, hidden, in_place)


class PrivateOptimizer(StrEnum):
    """``fedrecgel-private-optimizer``: the local optimiser of the user embeddings."""

    SGD = "sgd"
    ADAM = "adam"


#: FedRecGEL's own keys (its model's are FedNCF's).
class FedRecGelKeys(Group):
    title = "FedRecGEL"

    fedrecgel_loss_chunk: int = key(
        default=0,
        help="FedRecGEL's loss: `0`, each user's mean BCE over its batch; `n > 0`, the sum of "
        "the mean BCE of each `n` consecutive samples of the batch (the reference code: "
        "128), so that a user with more samples weighs more",
        range=NON_NEGATIVE,
        why=" (0 = each user's mean)",
    )
    fedrecgel_private_optimizer: str = key(
        default=PrivateOptimizer.SGD.value,
        help="local optimiser of the user embeddings: `sgd` or `adam` (the reference code: "
        "PyTorch's Adam with step `lr`, its state kept per user across rounds)",
        choices=PrivateOptimizer,
    )


def chunk_weights(weights: torch.Tensor, chunk: int) -> torch.Tensor:
    """Per-entry weights [a, B] of the sum of ``chunk``-sample means over each user's batch.

    ``weights`` is ``1 / (the user's batch size)`` on the real entries, which fill slots
    ``0 .. size - 1``; an entry's weight becomes ``1 / (the size of its chunk)``.
    """
    real = weights > 0
    size = torch.where(real, torch.round(1.0 / weights), torch.zeros_like(weights))
    start = (torch.arange(weights.shape[-1], device=weights.device) // chunk * chunk).to(size)
    chunk_size = torch.clamp(size - start, min=1.0, max=float(chunk))
    return torch.where(real, 1.0 / chunk_size, torch.zeros_like(weights))


class FedRecGEL(FedNCF):
    """FedNCF with sharpness-aware local steps. Both radii 0 is the ablation: its round
    (full-batch local step, the server's Adam) without SAM."""

    name = "fedrecgel"

    def __init__(self, config: RunGroups, num_items: int) -> None:
        super().__init__(config, num_items)
        keys = config.group(FedRecGelKeys)
        self.loss_chunk = keys.fedrecgel_loss_chunk
        self.private_adam = keys.fedrecgel_private_optimizer == PrivateOptimizer.ADAM

    def init_private(self, users: np.ndarray) -> dict[str, torch.Tensor]:
        """FedNCF's user embeddings, and their zero Adam state under the Adam optimiser."""
        private = super().init_private(users)
        return {**private, **adam_state(private)} if self.private_adam else private

    def phases(self) -> tuple[Phase, ...]:
        """FedNCF's phases, without the Adam state (the optimiser updates it)."""
        return tuple(
            Phase(phase.name, tuple(n for n in phase.params if not is_adam_state(n)))
            for phase in super().phases()
        )

    def loss(
        self,
        step: Step,
        params: dict[str, torch.Tensor],
        rows: torch.Tensor,
        logits: torch.Tensor,
    ) -> torch.Tensor:
        """Each user's mean BCE, or with ``fedrecgel-loss-chunk`` the sum of its chunks'."""
        if not self.loss_chunk:
            return super().loss(step, params, rows, logits)
        return (bce_losses(logits, step) * chunk_weights(step.weights, self.loss_chunk)).sum()


FEDNCF_CARD = MethodCard(
    FedNCF,
    title="FedNCF",
    paper="NeuMF (He et al., WWW 2017), federated as in Perifanis & Efraimidis 2022",
    keys=NcfKeys,
    search_space={"lr": LR, "item-lr": ITEM_LR, "dense-lr": Dim(0.01, 1.0), "init-std": INIT_STD},
    supports_dual=True,
    order=3,
)
FEDRECGEL_CARD = MethodCard(
    FedRecGEL,
    title="FedRecGEL",
    paper="FedRecGEL (2026; seeds 000/001): sharpness-aware generalised item embeddings",
    keys=FedRecGelKeys,
    # Its uploads are minus the gradient (item-lr 1): the server's Adam sets the step.
    search_space={"lr": LR, "server-lr": Dim(0.0001, 0.03), "init-std": INIT_STD},
    # The paper's SAM radii (Last.fm-2K, those of the paper presets), for a run that sets
    # neither radius; a run that sets one keeps the other's default.
    reference_defaults=({"sam-rho-private": 0.01, "sam-rho-shared": 0.01},),
    order=5,
)


def _linear(seed: int, name: str, fan_in: int, fan_out: int, index: int) -> dict:
    """nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), weight as [in, out]."""
    rng = keyed_rng(seed, "dense-init", index)
    bound = 1.0 / math.sqrt(fan_in)
    weight = rng.uniform(-bound, bound, size=(fan_in, fan_out)).astype(np.float32)
    bias = rng.uniform(-bound, bound, size=fan_out).astype(np.float32)
    return {f"{name}-weight": weight, f"{name}-bias": bias}


def _reference_linear(seed: int, name: str, fan_in: int, fan_out: int, index: int) -> dict:
    """FedRecGEL's reference init (``init_serve_weights``): zero bias; tower weights
    ``xavier_uniform_``, U(+-sqrt(6 / (fan_in + fan_out))); the output weight (fan_out 1)
    ``kaiming_uniform_(a=1, nonlinearity='sigmoid')``, gain 1: U(+-sqrt(3 / fan_in))."""
    rng = keyed_rng(seed, "dense-init", index)
    bound = math.sqrt(3.0 / fan_in) if name == "out" else math.sqrt(6.0 / (fan_in + fan_out))
    weight = rng.uniform(-bound, bound, size=(fan_in, fan_out)).astype(np.float32)
    return {f"{name}-weight": weight, f"{name}-bias": np.zeros(fan_out, dtype=np.float32)}
