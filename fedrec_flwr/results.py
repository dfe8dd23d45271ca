"""Run results on disk: ``config.json``, ``rounds.csv``, ``summary.json``, ``curves.png``,
``per-user.csv``.

``rounds.csv`` grows by one flushed row per round, so an interrupted run keeps every round it
finished. An ``INCOMPLETE`` file marks a run that has not finished (running, stopped or
crashed): written first, removed once ``summary.json`` is written. The test metrics reported
are those of the round with the best validation HR@10 (earliest round on ties): the model is
selected on validation only. ``per-user.csv`` holds each user's metrics at that round (one
row per user evaluated there, sorted by user): its column means are ``summary.json``'s. A run
with LDP adds ``ldp_user_level`` to the summary (:mod:`fedrec_flwr.privacy.accounting`).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.user_dataset import FILE_DATASET, source_record
from fedrec_flwr.evaluation import reported_metrics

SELECTION_METRIC = "val-hr@10"
PER_USER_FILE = "per-user.csv"
INCOMPLETE = "INCOMPLETE"
LOG = logging.getLogger("flwr")  # Flower's logger: what it logs reaches `flwr log`


def new_run_dir(config: RunConfig) -> Path:
    """A fresh folder ``<results-dir>/<run-name>``; never reuses a finished run's folder."""
    name = config.outputs.run_name or (
        f"{config.method_name}-{dataset_label(config)}-{config.training.protocol}-seed{config.training.seed}-"
        f"{time.strftime('%Y%m%d-%H%M%S')}"
    )
    path = config.results_path(name)
    suffix = 1
    while path.exists():
        suffix += 1
        path = config.results_path(f"{name}-{suffix}")
    path.mkdir(parents=True)
    if suffix > 1:
        LOG.warning(
            "results folder %s already exists: this run is written to %s (run-name '%s')",
            config.results_path(name),
            path,
            path.name,
        )
    return path


def dataset_label(config: RunConfig) -> str:
    """The dataset as a run folder names it: ``ml-100k``; a user's file ``file-<its name>``."""
    if config.data.dataset != FILE_DATASET or not config.data.file.data_file:
        return config.data.dataset
    return "file-" + re.sub(r"[^\w.-]+", "-", Path(config.data.file.data_file).stem).strip("-")


#: rounds.csv columns that time a round (wall, CPU): they differ from run to run.
TIMING_COLUMNS = ("seconds", "cpu-seconds")
#: Traffic: it depends on the wire form (record headers, packing) as well as on the model.
WIRE_COLUMNS = ("bytes-down", "bytes-up")
#: The columns counting a round's replies left out (failed, timed out, rejected).
LEFT_OUT_COLUMNS = ("train-failures", "eval-failures", "rejected-replies")


def write_per_user_csv(folder: Path, users: Any, names: Any, values: Any) -> None:
    """``<folder>/per-user.csv``: ``user,<names>``, one row per user sorted by user id, values
    as Python's shortest exact float text."""
    order = sorted(range(len(users)), key=lambda i: int(users[i]))
    with open(folder / PER_USER_FILE, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["user", *names])
        for i in order:
            writer.writerow([int(users[i]), *(repr(float(v)) for v in values[i])])


class RunRecorder:
    """Writes one run's results as it goes."""

    def __init__(
        self,
        run_dir: Path,
        config: RunConfig,
        extra: dict[str, Any],
        resumed_rows: list[dict[str, Any]] | None = None,
    ) -> None:
        """``resumed_rows``: a resumed run's rows up to its checkpoint, whose
        ``rounds.csv`` holds them already (:mod:`fedrec_flwr.server.checkpoint`)."""
        self.run_dir = run_dir
        self.config = config
        self.metrics = reported_metrics(config.training.protocol)
        self.columns = [
            "round",
            "seconds",
            "train-loss",
            *(f"{split}-{m}" for split in ("val", "test") for m in self.metrics),
            "bytes-down",
            "bytes-up",
            "c-density",
            "erank-global",
            "erank-personal",
            "train-users",
            "touched-items",
            "touched-items-total",
            "train-failures",
            "eval-failures",
            "rejected-replies",
            "eval-users",
            "cpu-seconds",
        ]
        # the attack's target items' exposure ER@10 (a plug-in's key, declared above: by name)
        if config.value("malicious-attack") != "none":
            self.columns.append("target-er@10")
        if config.evaluation.eval_loss:  # the generalization gap (fedrec_flwr.node.losses)
            self.columns += ["fit-loss", "val-loss", "gap"]
        self.rows: list[dict[str, Any]] = []
        self.stopped_diverged: int | None = None
        self.extra = {
            **source_record(config),
            **extra,
        }  # a user's file: its sha256
        self.mark_incomplete("running, stopped or crashed: summary.json not written yet")
        self.describe()
        if resumed_rows is not None:
            self.rows = list(resumed_rows)
            return
        with open(run_dir / "rounds.csv", "w", newline="") as f:
            csv.writer(f).writerow(self.columns)

    def describe(self, **extra: Any) -> None:
        """(Re)write ``config.json`` with ``extra`` added (e.g. the federation's size, known
        once the nodes have answered)."""
        self.extra.update(extra)
        (self.run_dir / "config.json").write_text(
            json.dumps({**self.config.to_mapping(), **self.extra}, indent=2) + "\n"
        )

    def record_round(self, figures: dict[str, Any]) -> None:
        """Append one round to ``rounds.csv`` (missing figures stay empty)."""
        if figures.get("diverged-round"):
            self.stopped_diverged = int(figures["diverged-round"])
        row = {column: figures.get(column, "") for column in self.columns}
        self.rows.append(row)
        with open(self.run_dir / "rounds.csv", "a", newline="") as f:
            csv.writer(f).writerow([row[c] for c in self.columns])

    def best_round(self) -> dict[str, Any] | None:
        """The evaluated round with the highest validation HR@10 (earliest on ties; a NaN
        is never best unless every value is NaN): the strategy's rule for ``best_val``, whose
        per-user metrics ``per-user.csv`` holds."""
        evaluated = [row for row in self.rows if row[SELECTION_METRIC] != ""]
        if not evaluated:
            return None
        numbers = [row for row in evaluated if not math.isnan(float(row[SELECTION_METRIC]))]
        return max(numbers or evaluated, key=lambda row: (row[SELECTION_METRIC], -row["round"]))

    def write_per_user(self, best_round: int, users: Any, values: Any) -> None:
        """Write ``per-user.csv``: ``user,<val-...>,<test-...>``, one row per user evaluated
        at ``best_round`` (which must be :meth:`best_round`'s), sorted by user; values as
        Python's shortest exact float text."""
        best = self.best_round()
        if best is None or best["round"] != best_round:
            raise ValueError(
                f"per-user metrics of round {best_round}, but the best validation round is "
                f"{best['round'] if best else None}"
            )
        names = [f"{split}-{m}" for split in ("val", "test") for m in self.metrics]
        if len(values) != len(users) or any(len(row) != len(names) for row in values):
            raise ValueError(f"per-user metrics must be [{len(users)}, {len(names)}]")
        write_per_user_csv(self.run_dir, users, names, values)

    def void_rounds(self) -> list[int]:
        """The rounds whose training changed nothing shared (no valid update arrived, or
        the round's update was refused), the round a diverged run stopped at aside: a
        run with any is not a plain completed one (:mod:`fedrec_lab.launch.run_folder`)."""
        diverged = self.diverged_round()
        return [
            int(row["round"])
            for row in self.rows
            if row["train-users"] in ("", None) and int(row["round"]) != diverged
        ]

    def partial_rounds(self) -> list[int]:
        """The rounds (void ones and a diverged run's last aside) in which some node's reply
        was left out: it failed, timed out or was rejected (NaN or inf in it, say). Their
        training and evaluation cover the other nodes' users only, so their figures are
        not those of every user (:mod:`fedrec_lab.launch.run_folder` says so)."""
        diverged = self.diverged_round()
        skipped = {*self.void_rounds(), *([] if diverged is None else [int(diverged)])}
        return [
            int(row["round"])
            for row in self.rows
            if int(row["round"]) not in skipped
            and any(float(row.get(c) or 0) > 0 for c in LEFT_OUT_COLUMNS)
        ]

    def diverged_round(self) -> int | None:
        """The round the run stopped at because every update held NaN or inf, or the first
        round whose training loss is not finite; None if the run did not diverge."""
        if self.stopped_diverged is not None:
            return self.stopped_diverged
        for row in self.rows:
            if row["train-loss"] != "" and not math.isfinite(float(row["train-loss"])):
                return row["round"]
        return None

    def finish(self, seconds: float) -> dict[str, Any]:
        """Write ``summary.json`` and ``curves.png``; return the summary."""
        best = self.best_round()
        evaluated = [row for row in self.rows if row[SELECTION_METRIC] != ""]
        last = evaluated[-1] if evaluated else None
        summary: dict[str, Any] = {
            "method": self.config.method_name,
            "dataset": self.config.data.dataset,
            **(
                {"data-file": self.config.data.file.data_file}
                if self.config.data.dataset == FILE_DATASET
                else {}
            ),
            "protocol": self.config.training.protocol,
            "seed": self.config.training.seed,
            "rounds": len(self.rows),
            "best_round": best["round"] if best else None,
            "val": {m: best[f"val-{m}"] for m in self.metrics} if best else {},
            "test": {m: best[f"test-{m}"] for m in self.metrics} if best else {},
            "seconds": round(seconds, 2),
            "seconds_per_round": round(seconds / max(len(self.rows), 1), 3),
            "bytes_down": sum(int(r["bytes-down"]) for r in self.rows),
            "bytes_up": sum(int(r["bytes-up"]) for r in self.rows),
            "final_val": {m: last[f"val-{m}"] for m in self.metrics} if last else {},
            "diverged_round": self.diverged_round(),
            "void_rounds": self.void_rounds(),
            "partial_rounds": self.partial_rounds(),
            **self.extra,
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        self.plot()
        (self.run_dir / INCOMPLETE).unlink(missing_ok=True)
        return summary

    def mark_incomplete(self, reason: str) -> None:
        """(Re)write the ``INCOMPLETE`` marker: why, when, which process wrote it."""
        (self.run_dir / INCOMPLETE).write_text(
            f"This run has not finished: {reason}.\n"
            "rounds.csv has a row for each round it finished.\n"
            f"written {time.strftime('%Y-%m-%d %H:%M:%S')} by PID {os.getpid()} on "
            f"{socket.gethostname()}\n"
        )

    def plot(self) -> None:
        """``curves.png``: train loss and validation/test metrics against rounds."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rounds = [r["round"] for r in self.rows]
        fig, axes = plt.subplots(1, 4, figsize=(20, 4))
        axes[0].plot(rounds, [_num(r["train-loss"]) for r in self.rows])
        axes[0].set(title="train loss (BCE)", xlabel="round")
        for name in ("erank-global", "erank-personal"):
            points = [(r["round"], r[name]) for r in self.rows if r[name] != ""]
            if points:
                axes[3].plot([x for x, _ in points], [y for _, y in points], label=name)
        axes[3].set(title="effective rank (dimensional collapse)", xlabel="round")
        if axes[3].lines:
            axes[3].legend()
        for ax, metric in zip(axes[1:3], ("hr@10", "ndcg@10"), strict=True):
            for split in ("val", "test"):
                points = [(r["round"], r[f"{split}-{metric}"]) for r in self.rows]
                points = [(x, y) for x, y in points if y != ""]
                ax.plot([x for x, _ in points], [y for _, y in points], label=split)
            best = self.best_round()
            if best:
                ax.axvline(best["round"], color="grey", linestyle=":", label="best val round")
            ax.set(title=f"{metric} ({self.config.training.protocol} protocol)", xlabel="round")
            ax.legend()
        config = self.config
        fig.suptitle(f"{config.method_name} on {config.data.dataset}, seed {config.training.seed}")
        fig.tight_layout()
        fig.savefig(self.run_dir / "curves.png", dpi=100)
        plt.close(fig)


def _num(value: Any) -> float:
    return float("nan") if value == "" else float(value)
