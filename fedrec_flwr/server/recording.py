"""A round's figures as the round runs, and its report once it ends (plain Python).

The report is one flat dict per round (the columns of ``rounds.csv``: timings, metrics,
traffic, touched rows, failures), handed to ``on_round`` (e.g.
:meth:`fedrec_flwr.results.RunRecorder.record_round`) and summed up in one log line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RoundLog", "RoundReporter"]

LOG = logging.getLogger("flwr")  # Flower's logger: what it logs reaches `flwr log`
ROUND_SECONDS = "round-seconds"
SHOWN = ("train-loss", "val-hr@10", "val-ndcg@10", "test-hr@10", "test-ndcg@10")


@dataclass
class RoundLog:
    """Traffic and training figures of one round (filled while the round runs)."""

    round: int
    bytes_down: int = 0
    bytes_up: int = 0
    train_users: int = 0
    train_failures: int = 0
    eval_failures: int = 0
    rejected_replies: int = 0  # train and evaluate replies that failed validation
    nonfinite_replies: int = 0  # of those, the ones holding NaN or inf
    touched_items: int = 0
    metrics: dict[str, float] = field(default_factory=dict)


class RoundReporter:
    """Times a run's rounds and reports each one to ``on_round`` and the log."""

    def __init__(self, on_round: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.on_round = on_round
        self.started = time.perf_counter()
        self.started_cpu = time.process_time()  # this process's CPU (in-process: the nodes' too)

    def start_clock(self) -> None:
        """The rounds start now."""
        self.started = time.perf_counter()
        self.started_cpu = time.process_time()

    def report(
        self,
        round_log: RoundLog,
        num_rounds: int,
        touched_total: int,
        diverged_round: int | None,
    ) -> dict[str, Any]:
        """Report a finished round (``touched_total``: rows any round has touched); its
        figures."""
        figures: dict[str, Any] = {
            "round": round_log.round,
            "seconds": round(time.perf_counter() - self.started, 3),
            "cpu-seconds": round(time.process_time() - self.started_cpu, 3),
            **round_log.metrics,
            "bytes-down": round_log.bytes_down,
            "bytes-up": round_log.bytes_up,
            "touched-items-total": touched_total,
            "train-failures": round_log.train_failures,
            "eval-failures": round_log.eval_failures,
            "diverged-round": diverged_round,
            "rejected-replies": round_log.rejected_replies,
        }
        shown = " ".join(f"{k} {figures[k]:.4f}" for k in SHOWN if k in figures)
        LOG.info(
            "[round %d/%d] %.1fs | %s | down %.2f MB up %.2f MB",
            round_log.round,
            num_rounds,
            figures["seconds"],
            shown,
            round_log.bytes_down / 1e6,
            round_log.bytes_up / 1e6,
        )
        if self.on_round is not None:
            self.on_round(figures)
        return figures

    def state_dict(self) -> dict[str, float]:
        """``round-seconds``: the run's seconds so far, which a resumed run continues from."""
        return {ROUND_SECONDS: time.perf_counter() - self.started}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue the clock of :meth:`state_dict`."""
        self.started = time.perf_counter() - state[ROUND_SECONDS]
