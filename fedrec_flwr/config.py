"""The run configuration: one typed, validated object built from Flower's run config.

Flower hands both apps ``context.run_config`` (the ``[tool.flwr.app.config]`` table of
``pyproject.toml`` merged with ``--run-config`` overrides). :func:`RunConfig.from_mapping` turns
it into a :class:`RunConfig`, rejecting unknown keys, wrong types and impossible values with a
message that says what to do.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from fedrec_flwr.data.registry import dataset_names

DATASETS = tuple(dataset_names())  # the registry: fedrec_flwr/data/registry.py
PROTOCOLS = ("strict", "paper")
AGGREGATIONS = ("round-mean", "toucher-mean")
ITEM_LR_SCALINGS = ("none", "num-items")
PERSONALIZATIONS = ("none", "dual")
SERVER_OPTIMIZERS = ("none", "sgd-momentum", "adam")
FEDRAP_SCHEDULES = ("tanh", "constant")
FEDRAP_REG_ROWS = ("held", "batch")
FEDRAP_DISTANCES = ("squared", "bounded")
FAULT_MODES = ("crash", "timeout")
KEEP_PERSONAL_ROWS = ("tuned", "positives")
LDP_MECHANISMS = ("none", "laplace", "gaussian")  # fedrec_flwr/privacy/ldp.py
DATA_DIR_ENV = "FEDREC_DATA_DIR"


class ConfigError(ValueError):
    """A run configuration value is unknown, of the wrong type or impossible."""


def _kebab(name: str) -> str:
    return name.replace("_", "-")


@dataclass(frozen=True)
class RunConfig:
    """Resolved run configuration; field ``foo_bar`` is run-config key ``foo-bar``."""

    method: str = "pfedrec"
    personalization: str = "none"
    dataset: str = "ml-100k"
    data_dir: str = ""
    protocol: str = "strict"
    num_server_rounds: int = 100
    fraction_train: float = 1.0
    local_epochs: int = 1
    batch_size: int = 256
    num_negatives: int = 4
    seed: int = 0
    results_dir: str = "results"
    run_name: str = ""
    checkpoint_every: int = 10
    resume: str = ""
    aggregation: str = "round-mean"
    embedding_dim: int = 32
    init_std: float = 1.0
    lr: float = 0.1
    item_lr: float = 8.0
    item_lr_scaling: str = "num-items"
    dense_lr: float = 0.1
    sam_rho_private: float = 0.0
    sam_rho_shared: float = 0.0
    server_optimizer: str = "none"
    server_lr: float = 1.0
    server_momentum: float = 0.9
    fedrecon_epochs: int = 5
    ncf_mlp_dim: int = 32
    ncf_layers: str = "32,16"
    fedrap_v1: float = 0.1
    fedrap_v2: float = 0.1
    fedrap_schedule: str = "tanh"
    fedrap_reg_rows: str = "held"
    fedrap_distance: str = "squared"
    fedrap_distance_bound: float = 1.0
    fedrap_zero_threshold: float = 0.0
    fedrap_local_lr_ratio: float = 1.0
    plgc: bool = False
    plgc_alpha: str = "ntk"
    plgc_decorrelation: float = 0.0
    plgc_persist: bool = False
    keep_personal_rows: str = "tuned"
    eval_every: int = 1
    eval_users: int = 0
    early_stopping_patience: int = 0
    device: str = "cpu"
    cuda_deterministic: bool = True
    torch_threads: int = 1
    node_wait_timeout: float = 120.0
    round_timeout: float = 3600.0
    max_in_flight: int = 32
    fault_fraction: float = 0.0
    fault_mode: str = "crash"
    ldp_mechanism: str = "none"
    ldp_epsilon: float = 1.0
    ldp_delta: float = 1e-5
    ldp_clip: float = 1.0
    ldp_laplace_lambda: float = 0.0
    ldp_denoise: bool = False
    decoy_ratio: float = 0.0
    synthetic_users: int = 1000
    synthetic_items: int = 2000
    synthetic_mean_degree: int = 50

    @classmethod
    def key_names(cls) -> list[str]:
        """All run-config keys (kebab-case)."""
        return [_kebab(f.name) for f in fields(cls)]

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> RunConfig:
        """Build and validate a config from kebab-case keys (missing keys take defaults)."""
        by_key = {_kebab(f.name): f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in mapping.items():
            if key not in by_key:
                hint = difflib.get_close_matches(key, by_key, n=1)
                raise ConfigError(
                    f"unknown run-config key '{key}'"
                    + (f" (did you mean '{hint[0]}'?)" if hint else "")
                    + f". Valid keys: {', '.join(sorted(by_key))}."
                )
            field = by_key[key]
            values[field.name] = _coerce(key, value, field.type)
        config = cls(**values)
        config.validate()
        return config

    def to_mapping(self) -> dict[str, Any]:
        """The config as kebab-case keys, as written to ``config.json``."""
        return {_kebab(k): v for k, v in dataclasses.asdict(self).items()}

    def replace(self, **changes: Any) -> RunConfig:
        """A validated copy with some fields changed (snake_case names)."""
        config = dataclasses.replace(self, **changes)
        config.validate()
        return config

    def validate(self) -> None:
        """Raise :class:`ConfigError` for impossible values."""
        # Local import: the registry's classes check their own combinations (below).
        from fedrec_flwr.methods import METHODS, build_method

        _choice("method", self.method, tuple(METHODS))
        _choice("personalization", self.personalization, PERSONALIZATIONS)
        _choice("server-optimizer", self.server_optimizer, SERVER_OPTIMIZERS)
        _choice("dataset", self.dataset, DATASETS)
        _choice("protocol", self.protocol, PROTOCOLS)
        _choice("aggregation", self.aggregation, AGGREGATIONS)
        _choice("item-lr-scaling", self.item_lr_scaling, ITEM_LR_SCALINGS)
        _positive("num-server-rounds", self.num_server_rounds)
        _positive("local-epochs", self.local_epochs)
        _positive("batch-size", self.batch_size)
        _positive("num-negatives", self.num_negatives)
        _positive("embedding-dim", self.embedding_dim)
        _positive("eval-every", self.eval_every)
        if self.eval_users < 0:
            raise ConfigError(
                f"eval-users={self.eval_users} must be >= 0: the number of users, drawn per "
                "round, that intermediate rounds evaluate (0 = all; the last round evaluates "
                "all users)."
            )
        if self.early_stopping_patience < 0:
            raise ConfigError(
                f"early-stopping-patience={self.early_stopping_patience} must be >= 0: the "
                "number of evaluated rounds without a better validation HR@10 after which the "
                "run stops (0 = never stop early)."
            )
        if self.checkpoint_every < 0:
            raise ConfigError(
                f"checkpoint-every={self.checkpoint_every} must be >= 0: the run is "
                "checkpointed every that many rounds so that `resume` can continue it (0 = "
                "never)."
            )
        _positive("node-wait-timeout", self.node_wait_timeout)
        _positive("round-timeout", self.round_timeout)
        if self.max_in_flight < 0:
            raise ConfigError(
                f"max-in-flight={self.max_in_flight} must be >= 0: the most messages the "
                "server keeps in flight at once in simulation (0 = all of a round at once)."
            )
        if not 0.0 <= self.fault_fraction < 1.0:
            raise ConfigError(
                f"fault-fraction={self.fault_fraction} must be in [0, 1): the chance that a "
                "node sent a train message fails in a round (0 = no injected faults)."
            )
        _choice("fault-mode", self.fault_mode, FAULT_MODES)
        self._validate_privacy()
        if not 0.0 < self.fraction_train <= 1.0:
            raise ConfigError(
                f"fraction-train={self.fraction_train} must be in (0, 1]: it is the share of "
                "users that train each round (1.0 = all users, as in the papers)."
            )
        if self.seed < 0:
            raise ConfigError(f"seed={self.seed} must be >= 0.")
        if self.init_std <= 0 or self.lr < 0 or self.item_lr < 0:
            raise ConfigError("init-std must be > 0; lr and item-lr must be >= 0.")
        if self.sam_rho_private < 0 or self.sam_rho_shared < 0:
            raise ConfigError("sam-rho-private and sam-rho-shared must be >= 0 (0 = no SAM).")
        if self.dense_lr < 0 or self.server_lr < 0:
            raise ConfigError(
                "dense-lr and server-lr must be >= 0 (server-lr = 0 with a server optimizer: "
                "the server never moves the global parameters, local-only training)."
            )
        if not 0.0 <= self.server_momentum < 1.0:
            raise ConfigError(
                f"server-momentum={self.server_momentum} must be in [0, 1) (Adam's beta1, or "
                "the momentum of sgd-momentum)."
            )
        if self.server_optimizer == "none" and self.server_lr != 1.0:
            raise ConfigError(
                "server-lr only applies with a server optimizer: set server-optimizer to "
                "'adam' or 'sgd-momentum', or leave server-lr at 1.0."
            )
        _positive("fedrecon-epochs", self.fedrecon_epochs)
        _positive("ncf-mlp-dim", self.ncf_mlp_dim)
        self.ncf_layer_sizes()
        _choice("fedrap-schedule", self.fedrap_schedule, FEDRAP_SCHEDULES)
        _choice("fedrap-reg-rows", self.fedrap_reg_rows, FEDRAP_REG_ROWS)
        _choice("fedrap-distance", self.fedrap_distance, FEDRAP_DISTANCES)
        if min(self.fedrap_v1, self.fedrap_v2, self.fedrap_zero_threshold) < 0:
            raise ConfigError(
                "fedrap-v1, fedrap-v2 and fedrap-zero-threshold must be >= 0 (0 = off)."
            )
        if self.fedrap_local_lr_ratio < 0:
            raise ConfigError("fedrap-local-lr-ratio must be >= 0 (0: D_u is never trained).")
        _positive("fedrap-distance-bound", self.fedrap_distance_bound)
        if self.plgc_alpha != "ntk":
            try:
                alpha = float(self.plgc_alpha)
            except ValueError:
                alpha = -1.0
            if not 0.0 <= alpha <= 1.0:
                raise ConfigError(
                    f"plgc-alpha='{self.plgc_alpha}' must be 'ntk' or a number in [0, 1] "
                    "(the fixed weight of the local rows)."
                )
        if self.plgc_decorrelation < 0:
            raise ConfigError("plgc-decorrelation must be >= 0 (0 = off).")
        if self.torch_threads < 0:
            raise ConfigError("torch-threads must be >= 0 (0 = PyTorch's default).")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"device='{self.device}': use 'cpu', 'cuda' or 'cuda:N'.")
        if self.dataset == "synthetic":
            _positive("synthetic-users", self.synthetic_users)
            if self.synthetic_mean_degree < 5:
                raise ConfigError(
                    "synthetic-mean-degree must be >= 5 (every synthetic user has >= 5 items)."
                )
            if self.synthetic_items < 2 * self.synthetic_mean_degree:
                raise ConfigError(
                    "synthetic-items must be at least twice synthetic-mean-degree so that "
                    "negatives can be sampled."
                )
        if not self.results_dir:
            raise ConfigError("results-dir must not be empty (default: 'results').")
        method = build_method(self, num_items=1)  # the method's own checks (dual, plgc)
        self._validate_keep_personal_rows(method)

    def _validate_keep_personal_rows(self, method) -> None:
        """``keep-personal-rows``: only for a method that keeps personal rows, and not with
        ``plgc-persist`` (whose local rows are trained from, not only evaluated with)."""
        _choice("keep-personal-rows", self.keep_personal_rows, KEEP_PERSONAL_ROWS)
        if self.keep_personal_rows == "tuned":
            return
        if not method.personal_rows:
            raise ConfigError(
                f"keep-personal-rows='{self.keep_personal_rows}' applies to a method that "
                f"keeps personal item rows (pfedrec, personalization='dual', plgc); method "
                f"'{self.method}' keeps none: leave keep-personal-rows = 'tuned'."
            )
        if method.train_from_personal:
            raise ConfigError(
                "keep-personal-rows='positives' and plgc-persist = true do not combine: "
                "persistent local rows are trained from in later rounds, not only evaluated "
                "with. Set one of them back (keep-personal-rows = 'tuned' or plgc-persist = "
                "false)."
            )

    def _validate_privacy(self) -> None:
        """The ``ldp-*`` and ``decoy-ratio`` keys (:mod:`fedrec_flwr.privacy`)."""
        _choice("ldp-mechanism", self.ldp_mechanism, LDP_MECHANISMS)
        _positive("ldp-epsilon", self.ldp_epsilon)
        _positive("ldp-clip", self.ldp_clip)
        if not 0.0 < self.ldp_delta < 1.0:
            raise ConfigError(
                f"ldp-delta={self.ldp_delta} must be in (0, 1) (the Gaussian mechanism's "
                "delta; e.g. 1e-5, below 1 / number of users)."
            )
        if self.ldp_laplace_lambda < 0:
            raise ConfigError(
                f"ldp-laplace-lambda={self.ldp_laplace_lambda} must be >= 0 (PFedRec Table 4's "
                "raw Laplace scale, 0 = off)."
            )
        if self.ldp_laplace_lambda > 0 and self.ldp_mechanism != "none":
            raise ConfigError(
                "ldp-laplace-lambda (raw noise, no clipping) and ldp-mechanism (clipped, "
                "calibrated to ldp-epsilon) are two alternatives: set one, leave the other off."
            )
        if self.ldp_denoise and self.ldp_mechanism == "none" and self.ldp_laplace_lambda == 0:
            raise ConfigError(
                "ldp-denoise shrinks the LDP noise out of the aggregate: it needs ldp-mechanism "
                "or ldp-laplace-lambda set (or set ldp-denoise = false)."
            )
        if self.decoy_ratio < 0:
            raise ConfigError(
                f"decoy-ratio={self.decoy_ratio} must be >= 0: decoy rows per distinct train "
                "positive (0 = none)."
            )
        if self.decoy_ratio > 0 and self.aggregation != "round-mean":
            raise ConfigError(
                "decoy-ratio > 0 needs aggregation='round-mean': toucher-mean divides a row's "
                "change by its number of uploaders, which decoys inflate unseen by the server."
            )

    def ncf_layer_sizes(self) -> tuple[int, ...]:
        """``ncf-layers`` as integers (the MLP tower's output sizes)."""
        try:
            sizes = tuple(int(part) for part in self.ncf_layers.split(","))
        except ValueError:
            sizes = ()
        if not sizes or min(sizes) <= 0:
            raise ConfigError(
                f"ncf-layers='{self.ncf_layers}' must be comma-separated positive layer sizes, "
                "e.g. '32,16' (input: 2 x ncf-mlp-dim)."
            )
        return sizes

    def resolved_data_dir(self) -> str:
        """``data-dir``, else ``$FEDREC_DATA_DIR``, else '' (= download into the cache)."""
        return self.data_dir or os.environ.get(DATA_DIR_ENV, "")

    def item_learning_rate(self, num_items: int) -> float:
        """The item-row learning rate after ``item-lr-scaling``."""
        if self.item_lr_scaling == "num-items":
            return self.item_lr * num_items
        return self.item_lr

    def results_path(self, run_name: str) -> Path:
        """Folder of one run's results."""
        return Path(self.results_dir) / run_name


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """Convert a TOML/CLI value to the field's type, or fail naming the key."""
    kind = {"int": int, "float": float, "str": str, "bool": bool}[str(annotation)]
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    if kind is str and key == "plgc-alpha" and isinstance(value, (int, float)):
        return repr(float(value))  # plgc-alpha=0.5 on the command line
    raise ConfigError(
        f"run-config key '{key}' must be of type {kind.__name__}, got {value!r} "
        f"({type(value).__name__})."
    )


def _choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        hint = difflib.get_close_matches(value, choices, n=1)
        raise ConfigError(
            f"{key}='{value}' is not known"
            + (f" (did you mean '{hint[0]}'?)" if hint else "")
            + f". Choose one of: {', '.join(choices)}."
        )


def _positive(key: str, value: float) -> None:
    if value <= 0:
        raise ConfigError(f"{key}={value} must be > 0.")
