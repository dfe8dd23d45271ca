"""The keys of the run itself: schedule, outputs, learning rates, server optimiser,
evaluation, execution and fault injection.

The keys of a method, a plug-in or a dataset are declared by its own module;
:mod:`fedrec_flwr.config` composes them all with these.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from fedrec_flwr.schema import NON_NEGATIVE, POSITIVE, ConfigError, Dim, Key, KeyGroup, Range


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


TRAINING = KeyGroup(
    title="Training",
    owner=__name__,
    keys=(
        Key(
            "protocol",
            EvaluationProtocol.STRICT.value,
            "evaluation protocol (`docs/protocols.md`)",
            choices=EvaluationProtocol,
        ),
        Key("num-server-rounds", 100, "federated rounds", range=POSITIVE),
        Key(
            "fraction-train",
            1.0,
            "share of users that train each round (drawn per round, keyed by the seed)",
            range=Range(0, 1, low_included=False),
            why=": it is the share of users that train each round (1.0 = all users, as in the "
            "papers)",
        ),
        Key("local-epochs", 1, "epochs over the user's samples per round", range=POSITIVE),
        Key("batch-size", 256, "samples per local mini-batch", range=POSITIVE),
        Key(
            "num-negatives",
            4,
            "negatives sampled per train positive, fresh every round",
            range=POSITIVE,
        ),
        Key(
            "train-negatives",
            TrainNegatives.PROTOCOL.value,
            "items training negatives are drawn from: `protocol` (`paper`: items the user never "
            "interacted with; `strict`: items not among its train positives) or `non-train` "
            "(items not among its train positives under either protocol: FedRecGEL's "
            "reference code, whose negatives may be its validation and test items)",
            choices=TrainNegatives,
        ),
        Key(
            "seed",
            0,
            "seed of every random draw (item init, negatives, shuffles, eval negatives, "
            "participants)",
            range=NON_NEGATIVE,
        ),
    ),
)

OUTPUTS = KeyGroup(
    title="Outputs, checkpoints and resume",
    owner=__name__,
    keys=(
        Key(
            "results-dir",
            "results",
            "where runs are written; a relative path is relative to the folder the SuperLink "
            "was started in (the project folder when `flwr run .` starts it)",
            check=check_results_dir,
        ),
        Key(
            "run-name",
            "",
            "name of the run's folder; empty: `<method>-<dataset>-<protocol>-seed<seed>-<time>`; "
            "a folder of that name is never reused: the run goes to `<run-name>-2` (`-3`, ...) "
            "and the log says so",
        ),
        Key(
            "checkpoint-every",
            10,
            "write a checkpoint every k rounds into `<run-dir>/checkpoint/` (the server's state "
            "and every node's private state); 0 = never",
            range=NON_NEGATIVE,
            why=": the run is checkpointed every that many rounds so that `resume` can continue "
            "it (0 = never)",
        ),
        Key(
            "resume",
            "",
            "a run folder `<results-dir>/<run-name>` whose run was stopped or crashed: continue "
            "it from its last checkpoint (the other keys must be the run's; `fedrec --resume "
            "<run-dir>` reads them from its `config.json`)",
        ),
    ),
)

LEARNING = KeyGroup(
    title="Model, aggregation and learning rates",
    owner=__name__,
    keys=(
        Key(
            "aggregation",
            Aggregation.ROUND_MEAN.value,
            "`round-mean`: a row moves by the sum of its users' changes / users in the round "
            "(what the papers' code does); `toucher-mean`: / users that trained the row",
            choices=Aggregation,
        ),
        Key("embedding-dim", 32, "item (and user) embedding size d", range=POSITIVE),
        Key(
            "init-std",
            1.0,
            "item rows (and FedMF user vectors) start N(0, init-std^2)",
            range=POSITIVE,
        ),
        Key(
            "lr",
            0.1,
            "learning rate of the private parameters (PFedRec score function, FedMF user vector)",
            range=NON_NEGATIVE,
        ),
        Key(
            "item-lr",
            8.0,
            'learning rate of the item rows, times `num_items` if `item-lr-scaling = "num-items"` '
            "(PFedRec's 0.1 x 80 x num_items)",
            range=NON_NEGATIVE,
        ),
        Key(
            "item-lr-scaling",
            ItemLrScaling.NUM_ITEMS.value,
            "`num-items`: `item-lr` is multiplied by the number of items; `none`: taken as is",
            choices=ItemLrScaling,
        ),
        Key(
            "dense-lr",
            0.1,
            "learning rate of the dense weights (FedNCF's MLP tower and output layer), shared "
            'or, under `personalization = "dual"`, private',
            range=NON_NEGATIVE,
        ),
    ),
)

SERVER = KeyGroup(
    title="Server optimiser",
    owner=__name__,
    check=check_server_lr,
    keys=(
        Key(
            "server-optimizer",
            ServerRule.NONE.value,
            "`none` (apply the mean change), `sgd-momentum` or `adam` on the aggregated change "
            "(pseudo-gradient = minus the change; rows: lazy, per-row state)",
            choices=ServerRule,
        ),
        Key(
            "server-lr",
            1.0,
            "learning rate of the server optimiser (must stay 1.0 with `none`); `0` with "
            "`sgd-momentum` or `adam`: the global table and shared-dense parameters never move, "
            "every user trains from the initial table each round: local-only training, no "
            "federation",
            range=NON_NEGATIVE,
            why=" (server-lr = 0 with a server optimizer: the server never moves the global "
            "parameters, local-only training)",
        ),
        Key(
            "server-momentum",
            0.9,
            "momentum of `sgd-momentum`, beta1 of `adam` (beta2 = 0.999, eps = 1e-8)",
            range=Range(0, 1, high_included=False),
            why=" (Adam's beta1, or the momentum of sgd-momentum)",
        ),
    ),
)

EVALUATION = KeyGroup(
    title="Evaluation and early stopping",
    owner=__name__,
    keys=(
        Key(
            "keep-personal-rows",
            KeepPersonalRows.TUNED.value,
            "which of the rows a user tuned in its latest round it keeps and evaluates with "
            '(methods with personal rows: `pfedrec`, `personalization = "dual"`, `plgc`): '
            "`tuned`, every one, its sampled negatives' included (the reference code); "
            "`positives`, only its train positives, the others scored from the global table",
            choices=KeepPersonalRows,
        ),
        Key(
            "eval-every",
            1,
            "evaluate every k rounds (and always after the last)",
            range=POSITIVE,
        ),
        Key(
            "eval-users",
            0,
            "evaluate only this many users (a seeded draw per round, the same whatever the "
            "packing) on intermediate rounds; the last round always evaluates all users; 0 = all",
            range=NON_NEGATIVE,
            why=": the number of users, drawn per round, that intermediate rounds evaluate (0 = "
            "all; the last round evaluates all users)",
        ),
        Key(
            "early-stopping-patience",
            0,
            "stop the run once validation HR@10 has not improved (strictly) for this many "
            "evaluated rounds; 0 = never. The test metrics reported stay those of the best "
            "validation round",
            range=NON_NEGATIVE,
            why=": the number of evaluated rounds without a better validation HR@10 after which "
            "the run stops (0 = never stop early)",
        ),
    ),
    search_space={"keep-personal-rows": Dim(choices=tuple(KeepPersonalRows))},
    tuned=keeps_rows_it_only_evaluates_with,
)

EXECUTION = KeyGroup(
    title="Execution",
    owner=__name__,
    keys=(
        Key(
            "device",
            "cpu",
            "`cpu`, `cuda`, `cuda:N`: where a node trains its users and scores them (a clear "
            "error if PyTorch sees no such GPU)",
            check=check_device,
        ),
        Key(
            "cuda-deterministic",
            True,
            "on CUDA, PyTorch's deterministic algorithms (row updates summed in a fixed order "
            "instead of with atomics, `CUBLAS_WORKSPACE_CONFIG` set)",
        ),
        Key(
            "torch-threads",
            1,
            "PyTorch threads per process (0: PyTorch's default); results do not depend on it",
            range=NON_NEGATIVE,
            why=" (0 = PyTorch's default)",
        ),
        Key(
            "node-wait-timeout",
            120.0,
            "seconds the server waits for all nodes to register",
            range=POSITIVE,
        ),
        Key(
            "round-timeout",
            3600.0,
            "seconds the server waits for the replies of one round",
            range=POSITIVE,
        ),
        Key(
            "max-in-flight",
            32,
            "simulation only: the most messages the server keeps in flight at once, a new one "
            "sent as each reply arrives; 0 = all of a round at once. Results do not depend on it",
            range=NON_NEGATIVE,
            why=": the most messages the server keeps in flight at once in simulation (0 = all "
            "of a round at once)",
        ),
    ),
)

FAULTS = KeyGroup(
    title="Fault injection (simulation)",
    owner=__name__,
    keys=(
        Key(
            "fault-fraction",
            0.0,
            "chance that a node sent a train message fails that round, keyed by (seed, round, "
            "partition-id)",
            range=Range(0, 1, high_included=False),
            why=": the chance that a node sent a train message fails in a round (0 = no "
            "injected faults)",
        ),
        Key(
            "fault-mode",
            FaultMode.CRASH.value,
            "how an injected fault fails: `crash` (the ClientApp raises: an error reply) or "
            "`timeout` (it answers after `round-timeout`: no reply; use a small `round-timeout`)",
            choices=FaultMode,
        ),
    ),
)
