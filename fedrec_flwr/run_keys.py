"""The keys of the run itself: schedule, outputs, learning rates, the local optimiser's
schedule, the server optimiser, evaluation, execution and fault injection, each group a
:class:`~fedrec_flwr.schema.Group`.

The keys of a method, a plug-in or a dataset are declared by its own module;
:mod:`fedrec_flwr.config` composes them all with these.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from fedrec_flwr.aggregation import DefenceKeys
from fedrec_flwr.sampling import NegativeSamplerKeys
from fedrec_flwr.schema import NON_NEGATIVE, POSITIVE, ConfigError, Dim, Group, Range, key


class EvaluationProtocol(StrEnum):
    """``protocol``: how held-out items are ranked (``docs/protocols.md``)."""

    STRICT = "strict"
    PAPER = "paper"


class TrainNegatives(StrEnum):
    """``train-negatives``: which items a user's training negatives are drawn from."""

    PROTOCOL = "protocol"
    NON_TRAIN = "non-train"


class Aggregation(StrEnum):
    """``aggregation``: what a row's summed change is divided by."""

    ROUND_MEAN = "round-mean"
    TOUCHER_MEAN = "toucher-mean"


class ItemLrScaling(StrEnum):
    """``item-lr-scaling``: is ``item-lr`` multiplied by the number of items?"""

    NONE = "none"
    NUM_ITEMS = "num-items"


class ServerRule(StrEnum):
    """``server-optimizer``: how the server applies the aggregated change."""

    NONE = "none"
    SGD_MOMENTUM = "sgd-momentum"
    ADAM = "adam"


class KeepPersonalRows(StrEnum):
    """``keep-personal-rows``: which tuned rows a user keeps and evaluates with."""

    TUNED = "tuned"
    POSITIVES = "positives"


class FaultMode(StrEnum):
    """``fault-mode``: how an injected fault fails."""

    CRASH = "crash"
    TIMEOUT = "timeout"


def check_results_dir(value: str) -> None:
    if not value:
        raise ConfigError("results-dir must not be empty (default: 'results').")


def check_device(value: str) -> None:
    if not (value == "cpu" or value.startswith("cuda")):
        raise ConfigError(f"device='{value}': use 'cpu', 'cuda' or 'cuda:N'.")


def check_server_lr(config: Any) -> None:
    if config.server_optimizer == ServerRule.NONE and config.server_lr != 1.0:
        raise ConfigError(
            "server-lr only applies with a server optimizer: set server-optimizer to "
            "'adam' or 'sgd-momentum', or leave server-lr at 1.0."
        )


def keeps_rows_it_only_evaluates_with(config: Any, method: Any) -> bool:
    """Is ``keep-personal-rows`` a choice for this method (the rule ``RunConfig`` enforces)?"""
    return method.personal_rows and not method.train_from_personal


class TrainingKeys(Group):
    title = "Training"

    protocol: str = key(
        default=EvaluationProtocol.STRICT.value,
        help="evaluation protocol (`docs/protocols.md`)",
        choices=EvaluationProtocol,
    )
    num_server_rounds: int = key(
        default=100,
        help="federated rounds",
        range=POSITIVE,
    )
    fraction_train: float = key(
        default=1.0,
        help="share of users that train each round (drawn per round, keyed by the seed)",
        range=Range(0, 1, low_included=False),
        why=": it is the share of users that train each round (1.0 = all users, as in the papers)",
    )
    local_epochs: int = key(
        default=1,
        help="epochs over the user's samples per round",
        range=POSITIVE,
    )
    batch_size: int = key(
        default=256,
        help="samples per local mini-batch",
        range=POSITIVE,
    )
    num_negatives: int = key(
        default=4,
        help="negatives sampled per train positive, fresh every round",
        range=POSITIVE,
    )
    train_negatives: str = key(
        default=TrainNegatives.PROTOCOL.value,
        help="items training negatives are drawn from: `protocol` (`paper`: items the user never "
        "interacted with; `strict`: items not among its train positives) or `non-train` "
        "(items not among its train positives under either protocol: FedRecGEL's "
        "reference code, whose negatives may be its validation and test items)",
        choices=TrainNegatives,
    )
    seed: int = key(
        default=0,
        help="seed of every random draw (item init, negatives, shuffles, eval negatives, "
        "participants)",
        range=NON_NEGATIVE,
    )


class OutputKeys(Group):
    title = "Outputs, checkpoints and resume"

    results_dir: str = key(
        default="results",
        help="where runs are written; a relative path is relative to the folder the SuperLink "
        "was started in (the project folder when `flwr run .` starts it)",
        check=check_results_dir,
    )
    run_name: str = key(
        default="",
        help="name of the run's folder; empty: `<method>-<dataset>-<protocol>-seed<seed>-<time>`; "
        "a folder of that name is never reused: the run goes to `<run-name>-2` (`-3`, ...) "
        "and the log says so",
    )
    checkpoint_every: int = key(
        default=10,
        help="write a checkpoint every k rounds into `<run-dir>/checkpoint/` (the server's state "
        "and every node's private state); 0 = never",
        range=NON_NEGATIVE,
        why=": the run is checkpointed every that many rounds so that `resume` can continue "
        "it (0 = never)",
    )
    keep_best_state: bool = key(
        default=False,
        help="keep the model of the best validation round in `<run-dir>/best-state/`: the "
        "server's evaluation table and dense parameters, and every node's private state "
        "(rewritten each time validation HR@10 improves; read by `fedrec analyze`)",
    )
    resume: str = key(
        default="",
        help="a run folder `<results-dir>/<run-name>` whose run was stopped or crashed: continue "
        "it from its last checkpoint (the other keys must be the run's; `fedrec --resume "
        "<run-dir>` reads them from its `config.json`)",
    )


class LearningKeys(Group):
    title = "Model, aggregation and learning rates"

    aggregation: str = key(
        default=Aggregation.ROUND_MEAN.value,
        help="`round-mean`: a row moves by the sum of its users' changes / users in the round "
        "(what the papers' code does); `toucher-mean`: / users that trained the row",
        choices=Aggregation,
    )
    embedding_dim: int = key(
        default=32,
        help="item (and user) embedding size d",
        range=POSITIVE,
    )
    init_std: float = key(
        default=1.0,
        help="item rows (and FedMF user vectors) start N(0, init-std^2)",
        range=POSITIVE,
    )
    lr: float = key(
        default=0.1,
        help="learning rate of the private parameters (PFedRec score function, FedMF user vector)",
        range=NON_NEGATIVE,
    )
    item_lr: float = key(
        default=8.0,
        help='learning rate of the item rows, times `num_items` if `item-lr-scaling = "num-items"` '
        "(PFedRec's 0.1 x 80 x num_items)",
        range=NON_NEGATIVE,
    )
    item_lr_scaling: str = key(
        default=ItemLrScaling.NUM_ITEMS.value,
        help="`num-items`: `item-lr` is multiplied by the number of items; `none`: taken as is",
        choices=ItemLrScaling,
    )
    dense_lr: float = key(
        default=0.1,
        help="learning rate of the dense weights (FedNCF's MLP tower and output layer), shared "
        'or, under `personalization = "dual"`, private',
        range=NON_NEGATIVE,
    )

    def item_learning_rate(self, num_items: int) -> float:
        """The item-row learning rate after ``item-lr-scaling``."""
        if self.item_lr_scaling == ItemLrScaling.NUM_ITEMS:
            return self.item_lr * num_items
        return self.item_lr


class ServerKeys(Group):
    title = "Server optimiser"

    server_optimizer: str = key(
        default=ServerRule.NONE.value,
        help="`none` (apply the mean change), `sgd-momentum` or `adam` on the aggregated change "
        "(pseudo-gradient = minus the change; rows: lazy, per-row state)",
        choices=ServerRule,
    )
    server_lr: float = key(
        default=1.0,
        help="learning rate of the server optimiser (must stay 1.0 with `none`); `0` with "
        "`sgd-momentum` or `adam`: the global table and shared-dense parameters never move, "
        "every user trains from the initial table each round: local-only training, no "
        "federation",
        range=NON_NEGATIVE,
        why=" (server-lr = 0 with a server optimizer: the server never moves the global "
        "parameters, local-only training)",
    )
    server_momentum: float = key(
        default=0.9,
        help="momentum of `sgd-momentum`, beta1 of `adam` (beta2 = 0.999, eps = 1e-8)",
        range=Range(0, 1, high_included=False),
        why=" (Adam's beta1, or the momentum of sgd-momentum)",
    )

    check = check_server_lr


class EvaluationKeys(Group):
    title = "Evaluation and early stopping"
    search_space: ClassVar[Mapping[str, Dim]] = {
        "keep-personal-rows": Dim(choices=tuple(KeepPersonalRows))
    }

    keep_personal_rows: str = key(
        default=KeepPersonalRows.TUNED.value,
        help="which of the rows a user tuned in its latest round it keeps and evaluates with "
        '(methods with personal rows: `pfedrec`, `personalization = "dual"`, `plgc`): '
        "`tuned`, every one, its sampled negatives' included (the reference code); "
        "`positives`, only its train positives, the others scored from the global table",
        choices=KeepPersonalRows,
    )
    eval_every: int = key(
        default=1,
        help="evaluate every k rounds (and always after the last)",
        range=POSITIVE,
    )
    eval_users: int = key(
        default=0,
        help="evaluate only this many users (a seeded draw per round, the same whatever the "
        "packing) on intermediate rounds; the last round always evaluates all users; 0 = all",
        range=NON_NEGATIVE,
        why=": the number of users, drawn per round, that intermediate rounds evaluate (0 = "
        "all; the last round evaluates all users)",
    )
    eval_loss: bool = key(
        default=False,
        help="also report each evaluated round the users' BCE at the model they evaluate with: "
        "`fit-loss` on their train positives, `val-loss` on their validation item (each "
        "against the same 99 validation negatives, one positive to `num-negatives` "
        "negatives) and `gap` = val-loss - fit-loss; under `paper` evaluation is then "
        "sent the train positives' rows and a user keeps every row it tuned",
    )
    early_stopping_patience: int = key(
        default=0,
        help="stop the run once validation HR@10 has not improved (strictly) for this many "
        "evaluated rounds; 0 = never. The test metrics reported stay those of the best "
        "validation round",
        range=NON_NEGATIVE,
        why=": the number of evaluated rounds without a better validation HR@10 after which "
        "the run stops (0 = never stop early)",
    )

    tuned = keeps_rows_it_only_evaluates_with


class ExecutionKeys(Group):
    title = "Execution"

    device: str = key(
        default="cpu",
        help="`cpu`, `cuda`, `cuda:N`: where a node trains its users and scores them (a clear "
        "error if PyTorch sees no such GPU)",
        check=check_device,
    )
    cuda_deterministic: bool = key(
        default=True,
        help="on CUDA, PyTorch's deterministic algorithms (row updates summed in a fixed order "
        "instead of with atomics, `CUBLAS_WORKSPACE_CONFIG` set)",
    )
    torch_threads: int = key(
        default=1,
        help="PyTorch threads per process (0: PyTorch's default); results do not depend on it",
        range=NON_NEGATIVE,
        why=" (0 = PyTorch's default)",
    )
    node_wait_timeout: float = key(
        default=120.0,
        help="seconds the server waits for all nodes to register",
        range=POSITIVE,
    )
    round_timeout: float = key(
        default=3600.0,
        help="seconds the server waits for the replies of one round",
        range=POSITIVE,
    )
    max_in_flight: int = key(
        default=32,
        help="simulation only: the most messages the server keeps in flight at once, a new one "
        "sent as each reply arrives; 0 = all of a round at once. Results do not depend on it",
        range=NON_NEGATIVE,
        why=": the most messages the server keeps in flight at once in simulation (0 = all "
        "of a round at once)",
    )


class FaultKeys(Group):
    title = "Fault injection (simulation)"

    fault_fraction: float = key(
        default=0.0,
        help="chance that a node sent a train message fails that round, keyed by (seed, round, "
        "partition-id)",
        range=Range(0, 1, high_included=False),
        why=": the chance that a node sent a train message fails in a round (0 = no "
        "injected faults)",
    )
    fault_mode: str = key(
        default=FaultMode.CRASH.value,
        help="how an injected fault fails: `crash` (the ClientApp raises: an error reply) or "
        "`timeout` (it answers after `round-timeout`: no reply; use a small `round-timeout`)",
        choices=FaultMode,
    )


#: A decay factor: in (0, 1], 1 = no decay.
DECAY = Range(0, 1, low_included=False)


class ScheduleKeys(Group):
    title = "Local schedule: weight decay and learning-rate decay"

    weight_decay: float = key(
        default=0.0,
        help="L2 weight decay of the local optimiser, as torch.optim.SGD's (`+ weight-decay * "
        "p` on the gradient of every trained parameter, Adam's private parameters too); "
        "item rows (shared and private, FedRAP's `D_u`) decay on every row the user holds "
        "this round at each of its steps, not on rows it does not hold (the reference "
        "code's dense gradients shrink every item row)",
        range=NON_NEGATIVE,
        why=" (0 = off)",
    )
    lr_decay: float = key(
        default=1.0,
        help="every local learning rate of round r (1-based) is multiplied by `lr-decay ** "
        "(r - 1)` (FedRAP's reference code: 0.97)",
        range=DECAY,
        why=" (1 = no decay; a factor per round)",
    )
    lr_step_decay: float = key(
        default=1.0,
        help="the s-th local step of a user in a round (0-based, over all its epochs and "
        "batches) takes every learning rate times `lr-step-decay ** s`, restarted each "
        "round (FedRAP's reference code: ExponentialLR(0.95) stepped after every batch)",
        range=DECAY,
        why=" (1 = no decay; a factor per local step)",
    )


class OptimizedRows(StrEnum):
    """``server-optimizer-rows``: which item rows the server optimiser steps each round."""

    TOUCHED = "touched"
    ALL = "all"


def check_optimized_rows(config: Any) -> None:
    if config.server_optimizer_rows != OptimizedRows.TOUCHED and config.server_optimizer == "none":
        raise ConfigError(
            f"server-optimizer-rows='{config.server_optimizer_rows}' applies to a server "
            "optimizer: set server-optimizer to 'adam' or 'sgd-momentum', or leave "
            "server-optimizer-rows = 'touched'."
        )


class ServerOptimizerKeys(Group):
    """The server optimiser's own keys (its rule, step and momentum are :class:`ServerKeys`)."""

    title = "Server optimiser rows"

    server_optimizer_rows: str = key(
        default=OptimizedRows.TOUCHED.value,
        help="item rows the server optimiser steps: `touched` (lazy, per-row state and step "
        "count) or `all` (the whole table every round, untouched rows with a zero "
        "pseudo-gradient, one step count: FedRecGEL's reference code)",
        choices=OptimizedRows,
    )

    check = check_optimized_rows


G = TypeVar("G", bound=Group)


class RunGroups:
    """A run's values by group: ``config.group(SamKeys)`` for any group, and the groups of
    the run itself by name (``config.training.seed``). Every layer reads a run's values
    through it; :class:`~fedrec_flwr.config.RunConfig` composes the groups."""

    def group(self, kind: type[G]) -> G:
        """The values of the keys of group ``kind``."""
        raise NotImplementedError

    @property
    def training(self) -> TrainingKeys:
        return self.group(TrainingKeys)

    @property
    def outputs(self) -> OutputKeys:
        return self.group(OutputKeys)

    @property
    def learning(self) -> LearningKeys:
        return self.group(LearningKeys)

    @property
    def schedule(self) -> ScheduleKeys:
        return self.group(ScheduleKeys)

    @property
    def server(self) -> ServerKeys:
        return self.group(ServerKeys)

    @property
    def server_rows(self) -> ServerOptimizerKeys:
        return self.group(ServerOptimizerKeys)

    @property
    def evaluation(self) -> EvaluationKeys:
        return self.group(EvaluationKeys)

    @property
    def execution(self) -> ExecutionKeys:
        return self.group(ExecutionKeys)

    @property
    def faults(self) -> FaultKeys:
        return self.group(FaultKeys)

    @property
    def sampler(self) -> NegativeSamplerKeys:
        return self.group(NegativeSamplerKeys)

    @property
    def defences(self) -> DefenceKeys:
        return self.group(DefenceKeys)
