"""Evaluation rounds without Flower: when a round evaluates, how many users, and how the
valid replies' metric sums become the round's means.

A round evaluates every ``eval-every`` rounds and after the last one; intermediate rounds
evaluate ``eval-users`` users (0: all), the last round every user. Each node replies with
metric sums over its evaluated users and each user's metrics (the ``per-user`` record); the
means are the sums over the nodes, in partition order (the same float sums in every run,
whatever order the replies arrive in), divided by the users evaluated. The per-user metrics
come back sorted by user (``per-user.csv``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrec_flwr.config import RunConfig
from fedrec_flwr.evaluation import reported_metrics
from fedrec_flwr.spectrum import effective_rank

__all__ = ["LOSSES", "EvaluationOutcome", "EvaluationRounds", "NodeEvaluation"]

#: Sums of the users' losses a node reports under ``eval-loss`` (fedrec_flwr.node.losses).
LOSSES = ("fit-loss", "val-loss")


@dataclass(frozen=True)
class NodeEvaluation:
    """One node's valid evaluate reply: its metric sums and its users' metrics."""

    partition_id: int
    metrics: Mapping[str, Any]
    user_ids: np.ndarray
    user_metrics: np.ndarray  # [users, val-* then test-*]


@dataclass(frozen=True)
class EvaluationOutcome:
    """A round's evaluation: the metric means and (user ids, metrics), sorted by user."""

    means: dict[str, float]
    per_user: tuple[np.ndarray, np.ndarray]


class EvaluationRounds:
    """The evaluation schedule of a run and the reduction of its replies."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        reported = reported_metrics(config.training.protocol)
        self.metric_names = [f"{split}-{m}" for split in ("val", "test") for m in reported]

    def due(self, server_round: int) -> bool:
        """Whether ``server_round`` evaluates (every ``eval-every`` rounds, and the last)."""
        last = server_round == self.config.training.num_server_rounds
        return last or not server_round % self.config.evaluation.eval_every

    def sample_size(self, server_round: int) -> int:
        """Users a round evaluates: ``eval-users``, but 0 (every user) in the last round."""
        last = server_round == self.config.training.num_server_rounds
        return 0 if last else self.config.evaluation.eval_users

    def combine(
        self, evaluated: Sequence[NodeEvaluation], table: np.ndarray | None
    ) -> EvaluationOutcome | None:
        """The means over the evaluated users of the valid replies (None: no user), with
        ``erank-global`` of ``table``, ``erank-personal`` when the nodes report it, and under
        ``eval-loss`` the mean ``fit-loss``, ``val-loss`` and their ``gap``."""
        sums = dict.fromkeys(self.metric_names, 0.0)
        users = 0
        erank_sum, erank_users = 0.0, 0
        exposed: float | None = None  # users with a target item in their top 10 (an attack)
        losses: dict[str, float] = {}  # eval-loss: sums of the users' fit and val losses
        for node in sorted(evaluated, key=lambda node: node.partition_id):
            metrics = node.metrics
            users += int(metrics["num-users"])
            for name in LOSSES:
                if name in metrics:
                    losses[name] = losses.get(name, 0.0) + float(metrics[name])
            if "erank-personal-users" in metrics:
                erank_sum += float(metrics["erank-personal-sum"])
                erank_users += int(metrics["erank-personal-users"])
            if "target-exposed" in metrics:
                exposed = (exposed or 0.0) + float(metrics["target-exposed"])
            for name in self.metric_names:
                sums[name] += float(metrics[name])
        if users == 0:
            return None
        ids = np.concatenate([node.user_ids for node in evaluated])
        values = np.concatenate(
            [np.asarray(node.user_metrics, dtype=np.float64) for node in evaluated]
        )
        order = np.argsort(ids, kind="stable")
        means: dict[str, float] = {name: value / users for name, value in sums.items()}
        means["eval-users"] = users
        if table is not None:  # not for an item-item matrix (it is no embedding table)
            means["erank-global"] = effective_rank(table)
        if erank_users:
            means["erank-personal"] = erank_sum / erank_users
        if exposed is not None:
            means["target-er@10"] = exposed / users
        if len(losses) == len(LOSSES):
            means.update({name: value / users for name, value in losses.items()})
            means["gap"] = means["val-loss"] - means["fit-loss"]
        return EvaluationOutcome(means, (ids[order], values[order]))
