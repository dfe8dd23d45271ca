"""The keys of the run itself: its schedule, outputs, evaluation, execution and fault
injection, each group a :class:`~fedrec_flwr.schema.Group` (how its parameters learn is in
:mod:`fedrec_flwr.learning_keys`), and :class:`RunGroups`, a run's values by group.

The keys of a method, a plug-in or a dataset are declared by its own module;
:mod:`fedrec_flwr.config` composes them all with these.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import ClassVar, TypeVar

from fedrec_flwr.aggregation import DefenceKeys
from fedrec_flwr.learning_keys import (
    LearningKeys,
    ScheduleKeys,
    ServerKeys,
    ServerOptimizerKeys,
)
from fedrec_flwr.sampling import NegativeSamplerKeys
from fedrec_flwr.schema import (
    NON_NEGATIVE,
    POSITIVE,
    ConfigError,
    Dim,
    Group,
    MethodTraits,
    Range,
    RunValues,
    Scalar,
    key,
)


class EvaluationProtocol(StrEnum):
    """``protocol``: how held-out items are ranked (``docs/protocols.md``)."""

    STRICT = "strict"
    PAPER = "paper"


class TrainNegatives(StrEnum):
    """``train-negatives``: which items a user's training negatives are drawn from."""

    PROTOCOL = "protocol"
    NON_TRAIN = "non-train"


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


def keeps_rows_it_only_evaluates_with(config: RunValues, method: MethodTraits) -> bool:
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


G = TypeVar("G", bound=Group)


class RunGroups:
    """A run's values by group: ``config.group(SamKeys)`` for any group, and the groups of
    the run itself by name (``config.training.seed``). Every layer reads a run's values
    through it; :class:`~fedrec_flwr.config.RunConfig` composes the groups."""

    def group(self, kind: type[G]) -> G:
        """The values of the keys of group ``kind``."""
        raise NotImplementedError

    def value(self, name: str) -> Scalar:
        """Run-config key ``name`` (``decoy-ratio``), read through its group: for a check
        across groups declared above the module that reads them."""
        raise NotImplementedError

    @property
    def method_name(self) -> str:
        """The ``method`` key: the registered method the run trains."""
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
