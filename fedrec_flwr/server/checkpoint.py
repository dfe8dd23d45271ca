"""Checkpoints of a run (``checkpoint-every``), from which ``resume`` continues it
(:mod:`fedrec_flwr.resume`) with the metrics an uninterrupted run would have had.

Every ``checkpoint-every`` rounds (not after the last), once the round is in ``rounds.csv``:

1. every node writes its private state after that round (query ``checkpoint``,
   :mod:`fedrec_flwr.node.state_store`): into ``<run-dir>/checkpoint/round-<r>/`` in simulation,
   into ``<state-dir>/<run-key>/round-<r>/`` on a device with a ``state-dir``;
2. once every node has answered, the server writes ``round-<r>/server.npz``: the global item
   table, the shared-dense parameters, the server optimiser's state, the rows ever touched,
   each partition's pending row request, the best-validation record (and the per-user
   metrics of that round, for ``per-user.csv``), and the results so far (the rows of
   ``rounds.csv`` and its text);
3. then ``<run-dir>/checkpoint/latest.json`` names round ``r``: the commit. Older round
   folders are removed; a node keeps its files of the round last committed until the next.

Files are written atomically (:mod:`fedrec_flwr.atomic`), so a kill at any moment leaves the
last committed checkpoint whole. Every random draw is keyed by (seed, user, round): nothing
else is needed to replay the rounds after it bit for bit. ``checkpoint/`` is removed once the
run completes.
"""

from __future__ import annotations

import json
import shutil
import time
from logging import INFO, WARNING
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import uuid4

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from fedrec_flwr import atomic
from fedrec_flwr.config import RunConfig
from fedrec_flwr.messages import CONFIG, METRICS
from fedrec_flwr.node.state_store import CHECKPOINT_DIR, RESTORE_ROUND, RUN_KEY, SESSION
from fedrec_flwr.results import RunRecorder, new_run_dir
from fedrec_flwr.resume import (
    FOLDER,
    LATEST,
    SERVER,
    CheckpointError,
    Resumed,
    fingerprinted_config,
)

if TYPE_CHECKING:
    from fedrec_flwr.server.strategy import FedRecStrategy

__all__ = ["CheckpointError", "Checkpoints"]


class Checkpoints:
    """The checkpoints of one start of a run: its folder, run key and session, and the
    checkpoint it resumes from (if any)."""

    def __init__(
        self, run_dir: Path, config: RunConfig, started: float, resumed: Resumed | None = None
    ) -> None:
        self.run_dir = run_dir
        self.folder = run_dir.resolve() / FOLDER
        self.config = config
        self.started = started  # perf_counter() when the ServerApp started
        self.resumed = resumed
        self.session = uuid4().hex[:12]  # one per start: a node's latest state names it
        self.run_key = (resumed and resumed.run_key) or f"{run_dir.name}-{uuid4().hex[:8]}"
        self.committed = resumed.round if resumed else 0  # the round latest.json names
        self.recorder: RunRecorder | None = None  # whose rows a checkpoint keeps

    @classmethod
    def open(cls, config: RunConfig, started: float) -> Checkpoints:
        """A fresh run's (in a new run folder), or the resumed run's (checked)."""
        if not config.resume:
            return cls(new_run_dir(config), config, started)
        resumed = Resumed.load(config)
        where = resumed.run_dir
        if resumed.round:
            log(INFO, "resume: %s from its checkpoint of round %d", where, resumed.round)
        else:
            log(WARNING, "resume: %s has no checkpoint: it starts again at round 1", where)
        return cls(resumed.run_dir, config, started, resumed)

    @property
    def restore_round(self) -> int:
        """The round this start continues after (0: a fresh run, or no checkpoint)."""
        return self.resumed.round if self.resumed else 0

    @property
    def prior_seconds(self) -> float:
        """Seconds the run had run before this start, up to its checkpoint."""
        return float(self.resumed.meta.get("elapsed", 0.0)) if self.resumed else 0.0

    def message_config(self) -> dict[str, Any]:
        """What every train, evaluate and checkpoint message tells the nodes."""
        return {
            RUN_KEY: self.run_key,
            SESSION: self.session,
            RESTORE_ROUND: self.restore_round,
            CHECKPOINT_DIR: str(self.folder),
        }

    def restore(self, strategy: FedRecStrategy, grid: Grid, timeout: float) -> int:
        """Put the checkpoint's state into the connected ``strategy`` and have every node
        reload its own; the round to continue after (0: from the start)."""
        if not self.restore_round:
            return 0
        meta, arrays = self.resumed.meta, self.resumed.arrays
        partitions = {info.partition_id: info for info in strategy.nodes.values()}
        if sorted(partitions) != list(range(meta["num-partitions"])):
            raise CheckpointError(
                f"resume: the checkpoint holds the states of {meta['num-partitions']} "
                f"partitions, {len(partitions)} connected: resume with as many nodes"
            )
        strategy.table = arrays["item-table"]
        strategy.round_start_table = strategy.table
        strategy.dense = {name: arrays[f"dense/{name}"] for name in strategy.dense}
        strategy.optimizer.load_state_arrays(
            {k.removeprefix("optim/"): v for k, v in arrays.items() if k.startswith("optim/")}
        )
        strategy.touched_ever = arrays["touched-ever"]
        strategy.best_val = tuple(meta["best-val"]) if meta["best-val"] else None
        if "best-user-ids" in arrays:
            strategy.best_per_user = (arrays["best-user-ids"], arrays["best-user-metrics"])
        strategy.evals_since_best = meta["evals-since-best"]
        strategy.started = time.perf_counter() - meta["round-seconds"]
        for partition, info in partitions.items():
            info.request_round = meta["requests"][str(partition)]
            info.request_items = arrays.get(f"request/{partition}")
        failed = self._ask(strategy, grid, "restore", {}, timeout)[1]
        if failed:
            raise CheckpointError(
                f"resume from round {self.restore_round}: node states refused: " + "; ".join(failed)
            )
        return self.restore_round

    def after_round(
        self, strategy: FedRecStrategy, grid: Grid, server_round: int, timeout: float
    ) -> None:
        """Checkpoint ``server_round`` if it is due (see the module's doc)."""
        every = self.config.checkpoint_every
        if not every or server_round % every or server_round >= self.config.num_server_rounds:
            return
        begun = time.perf_counter()
        asked = {"server-round": server_round, "committed-round": self.committed}
        written, failed = self._ask(strategy, grid, "checkpoint", asked, timeout)
        if failed:
            log(
                WARNING,
                "round %d: no checkpoint (the last one stays round %d): %s",
                server_round,
                self.committed,
                "; ".join(failed),
            )
            return
        with open(self.run_dir / "rounds.csv", newline="") as f:
            rounds_csv = f.read()
        meta = {
            "round": server_round,
            "run-key": self.run_key,
            "config": fingerprinted_config(self.config),
            "num-partitions": len(strategy.nodes),
            "requests": {str(i.partition_id): i.request_round for i in strategy.nodes.values()},
            "best-val": strategy.best_val,
            "evals-since-best": strategy.evals_since_best,
            "round-seconds": time.perf_counter() - strategy.started,
            "elapsed": self.prior_seconds + time.perf_counter() - self.started,
            "rows": self.recorder.rows if self.recorder else [],
            "rounds-csv": rounds_csv,
        }
        server = Path(f"round-{server_round}") / SERVER
        size = atomic.savez_tagged(self.folder / server, meta, server_arrays(strategy))
        pointer = {
            "round": server_round,
            "run-key": self.run_key,
            "server": str(server),
            "num-partitions": len(strategy.nodes),
        }
        atomic.write_text(self.folder / LATEST, json_text(pointer))
        self.committed = server_round
        for old in self.folder.glob("round-*"):
            if old.name != server.parent.name:
                shutil.rmtree(old, ignore_errors=True)
        log(
            INFO,
            "round %d: checkpoint written in %.2f s (server %.2f MB, nodes %.2f MB)",
            server_round,
            time.perf_counter() - begun,
            size / 1e6,
            sum(written) / 1e6,
        )

    def completed(self) -> None:
        """The run finished: its checkpoints are no longer needed."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def _ask(
        self, strategy: FedRecStrategy, grid: Grid, action: str, config: dict, timeout: float
    ) -> tuple[list[int], list[str]]:
        """Send query ``action`` to every node; (bytes each wrote, why each failed)."""
        content = ConfigRecord({**config, **self.message_config()})
        kind = f"{MessageType.QUERY}.{action}"
        messages = [
            Message(RecordDict({CONFIG: content}), dst_node_id=node_id, message_type=kind)
            for node_id in strategy.nodes
        ]
        waiting = set(strategy.nodes)
        written, failed = [], []
        replies = grid.send_and_receive(messages, timeout=timeout)
        # the node a reply answers for (an error the SuperLink writes comes from the SuperLink)
        answers = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
        for reply in replies:
            node_id = answers.get(reply.metadata.reply_to_message_id, reply.metadata.src_node_id)
            if node_id not in waiting:
                continue
            waiting.discard(node_id)
            partition = strategy.nodes[node_id].partition_id
            if reply.has_error():
                failed.append(f"partition {partition}: {reply.error.reason.splitlines()[0]}")
            else:
                written.append(int(reply.content[METRICS].get("bytes", 0)))
        failed += [f"partition {strategy.nodes[n].partition_id}: no reply" for n in waiting]
        return written, failed


def server_arrays(strategy: FedRecStrategy) -> dict[str, np.ndarray]:
    """The server's arrays a checkpoint holds."""
    arrays = {"item-table": strategy.table, "touched-ever": strategy.touched_ever}
    arrays.update({f"dense/{name}": value for name, value in strategy.dense.items()})
    state = strategy.optimizer.state_arrays()
    arrays.update({f"optim/{key}": value for key, value in state.items()})
    for info in strategy.nodes.values():
        if info.request_items is not None:
            arrays[f"request/{info.partition_id}"] = info.request_items
    if strategy.best_per_user is not None:
        arrays["best-user-ids"], arrays["best-user-metrics"] = strategy.best_per_user
    return arrays


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"
