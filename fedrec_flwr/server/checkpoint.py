"""Checkpoints of a run (``checkpoint-every``), from which ``resume`` continues it
(:mod:`fedrec_flwr.resume`) with the metrics an uninterrupted run would have had.

Every ``checkpoint-every`` rounds (not after the last), once the round is in ``rounds.csv``:

1. every node writes its private state after that round (query ``checkpoint``,
   :mod:`fedrec_flwr.node.state_store`): into ``<run-dir>/checkpoint/round-<r>/`` in simulation,
   into ``<state-dir>/<run-key>/round-<r>/`` on a device with a ``state-dir``;
2. once every node has answered, the server writes ``round-<r>/server.npz``: the server's
   state dict (:class:`ServerState`; its arrays as arrays, the rest in the JSON tag): the
   global item table, the shared-dense parameters, the server optimiser's state and the rows
   ever touched (:class:`~fedrec_flwr.server.model.ServerModel`), each partition's pending
   row request (:class:`~fedrec_flwr.server.payloads.PayloadPlanner`), the best-validation
   record and the per-user metrics of that round
   (:class:`~fedrec_flwr.server.stopping.RunStopping`), the run's clock; and the results so
   far (the rows of ``rounds.csv`` and its text);
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
from collections.abc import Mapping
from logging import INFO, WARNING
from pathlib import Path
from typing import Any, Protocol
from uuid import uuid4

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from fedrec_flwr import atomic
from fedrec_flwr.config import RunConfig
from fedrec_flwr.messages import (
    BEST_STATE,
    CHECKPOINT_DIR,
    CONFIG,
    RESTORE_ROUND,
    RUN_KEY,
    SESSION,
    int_value,
    metric_record,
)
from fedrec_flwr.results import RunRecorder, new_run_dir
from fedrec_flwr.resume import (
    FOLDER,
    LATEST,
    SERVER,
    CheckpointError,
    Resumed,
    fingerprinted_config,
)
from fedrec_flwr.server.global_model import GlobalModel
from fedrec_flwr.server.nodes import NodeInfo
from fedrec_flwr.server.stopping import RunStopping

__all__ = [
    "BEST_FOLDER",
    "BEST_POINTER",
    "CheckpointError",
    "Checkpoints",
    "ServerState",
    "open_run",
]

#: ``keep-best-state``: the folder (in the run's) and the file naming its round.
BEST_FOLDER, BEST_POINTER = "best-state", "best.json"


class ServerState(Protocol):
    """What a checkpoint saves and restores: the connected nodes and the server's state
    dict (arrays go to ``server.npz``'s arrays, the rest to its JSON tag)."""

    @property
    def nodes(self) -> Mapping[int, NodeInfo]: ...

    @property
    def model(self) -> GlobalModel: ...

    @property
    def stopping(self) -> RunStopping: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


def open_run(config: RunConfig) -> tuple[Path, Resumed | None]:
    """A fresh run's new folder, or the folder of the run ``resume`` names and its
    checkpoint (checked)."""
    if not config.outputs.resume:
        return new_run_dir(config), None
    resumed = Resumed.load(config)
    where = resumed.run_dir
    if resumed.round:
        log(INFO, "resume: %s from its checkpoint of round %d", where, resumed.round)
    else:
        log(WARNING, "resume: %s has no checkpoint: it starts again at round 1", where)
    return resumed.run_dir, resumed


class Checkpoints:
    """The checkpoints of one start of a run: its folder, run key and session, the recorder
    whose rows a checkpoint keeps, and the checkpoint it resumes from (if any)."""

    def __init__(
        self,
        run_dir: Path,
        config: RunConfig,
        started: float,
        recorder: RunRecorder,
        resumed: Resumed | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.folder = run_dir.resolve() / FOLDER
        self.config = config
        self.started = started  # perf_counter() when the ServerApp started
        self.recorder = recorder
        self.resumed = resumed
        self.session = uuid4().hex[:12]  # one per start: a node's latest state names it
        self.run_key = (resumed and resumed.run_key) or f"{run_dir.name}-{uuid4().hex[:8]}"
        self.committed = resumed.round if resumed else 0  # the round latest.json names

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

    def restore(self, server: ServerState, grid: Grid, timeout: float) -> int:
        """Load the checkpoint's state into the connected ``server`` and have every node
        reload its own; the round to continue after (0: from the start)."""
        if not self.restore_round or self.resumed is None:
            return 0
        meta, arrays = self.resumed.meta, self.resumed.arrays
        partitions = sorted(info.partition_id for info in server.nodes.values())
        if partitions != list(range(meta["num-partitions"])):
            raise CheckpointError(
                f"resume: the checkpoint holds the states of {meta['num-partitions']} "
                f"partitions, {len(partitions)} connected: resume with as many nodes"
            )
        server.load_state_dict({**meta, **arrays})
        failed = self._ask(server.nodes, grid, "restore", {}, timeout)[1]
        if failed:
            raise CheckpointError(
                f"resume from round {self.restore_round}: node states refused: " + "; ".join(failed)
            )
        return self.restore_round

    def after_round(
        self, server: ServerState, grid: Grid, server_round: int, timeout: float
    ) -> None:
        """Checkpoint ``server_round`` if it is due (see the module's doc); under
        ``keep-best-state`` keep its model first if it is the best validation round so far."""
        self._keep_best(server, grid, server_round, timeout)
        every, rounds = self.config.outputs.checkpoint_every, self.config.training.num_server_rounds
        if not every or server_round % every or server_round >= rounds:
            return
        begun = time.perf_counter()
        asked = {"server-round": server_round, "committed-round": self.committed}
        written, failed = self._ask(server.nodes, grid, "checkpoint", asked, timeout)
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
        state = server.state_dict()
        arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
        meta = {
            "round": server_round,
            "run-key": self.run_key,
            "config": fingerprinted_config(self.config),
            "num-partitions": len(server.nodes),
            **{k: v for k, v in state.items() if k not in arrays},
            "elapsed": self.prior_seconds + time.perf_counter() - self.started,
            "rows": self.recorder.rows,
            "rounds-csv": rounds_csv,
        }
        server_file = Path(f"round-{server_round}") / SERVER
        size = atomic.savez_tagged(self.folder / server_file, meta, arrays)
        pointer = {
            "round": server_round,
            "run-key": self.run_key,
            "server": str(server_file),
            "num-partitions": len(server.nodes),
        }
        atomic.write_text(self.folder / LATEST, json_text(pointer))
        self.committed = server_round
        for old in self.folder.glob("round-*"):
            if old.name != server_file.parent.name:
                shutil.rmtree(old, ignore_errors=True)
        log(
            INFO,
            "round %d: checkpoint written in %.2f s (server %.2f MB, nodes %.2f MB)",
            server_round,
            time.perf_counter() - begun,
            size / 1e6,
            sum(written) / 1e6,
        )

    def _keep_best(self, server: ServerState, grid: Grid, server_round: int, timeout: float):
        """Under ``keep-best-state``, keep ``server_round``'s model if it is the best
        validation round so far (:meth:`save_best`)."""
        best = server.stopping.best_val
        if self.config.outputs.keep_best_state and best is not None and best[1] == server_round:
            model = server.model
            evaluated = {"eval-table": model.evaluation_table(), "table": model.table}
            evaluated.update({f"dense/{name}": v for name, v in model.dense.items()})
            self.save_best(server, grid, server_round, evaluated, timeout)

    def save_best(
        self,
        server: ServerState,
        grid: Grid,
        server_round: int,
        arrays: Mapping[str, np.ndarray],
        timeout: float,
    ) -> None:
        """``keep-best-state``: ``server_round`` is the best validation round so far; keep
        its model in ``<run-dir>/best-state/``: every node's private state
        (``round-<r>/partition-<p>.npz``) and ``server.npz``, the ``arrays`` evaluation read
        (the table and the shared-dense parameters); ``best.json`` names the round last."""
        folder = self.run_dir.resolve() / BEST_FOLDER
        asked = {
            "server-round": server_round,
            "committed-round": 0,
            BEST_STATE: True,
            CHECKPOINT_DIR: str(folder),
        }
        failed = self._ask(server.nodes, grid, "checkpoint", asked, timeout)[1]
        if failed:
            log(WARNING, "round %d: best state not kept: %s", server_round, "; ".join(failed))
            return
        meta = {
            "round": server_round,
            "run-key": self.run_key,
            "config": fingerprinted_config(self.config),
            "num-partitions": len(server.nodes),
        }
        atomic.savez_tagged(folder / SERVER, meta, dict(arrays))
        atomic.write_text(
            folder / BEST_POINTER, json_text({**meta, "nodes": f"round-{server_round}"})
        )
        for old in folder.glob("round-*"):
            if old.name != f"round-{server_round}":
                shutil.rmtree(old, ignore_errors=True)

    def completed(self) -> None:
        """The run finished: its checkpoints are no longer needed."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def _ask(
        self,
        nodes: Mapping[int, NodeInfo],
        grid: Grid,
        action: str,
        config: dict,
        timeout: float,
    ) -> tuple[list[int], list[str]]:
        """Send query ``action`` to every node; (bytes each wrote, why each failed)."""
        content = ConfigRecord({**self.message_config(), **config})
        kind = f"{MessageType.QUERY}.{action}"
        messages = [
            Message(RecordDict({CONFIG: content}), dst_node_id=node_id, message_type=kind)
            for node_id in nodes
        ]
        waiting = set(nodes)
        written, failed = [], []
        replies = grid.send_and_receive(messages, timeout=timeout)
        # the node a reply answers for (an error the SuperLink writes comes from the SuperLink)
        answers = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
        for reply in replies:
            node_id = answers.get(reply.metadata.reply_to_message_id, reply.metadata.src_node_id)
            if node_id not in waiting:
                continue
            waiting.discard(node_id)
            partition = nodes[node_id].partition_id
            if reply.has_error():
                reason = reply.error.reason or "no reason given"
                failed.append(f"partition {partition}: {reason.splitlines()[0]}")
            else:
                written.append(int_value(metric_record(reply.content), "bytes", 0))
        failed += [f"partition {nodes[n].partition_id}: no reply" for n in waiting]
        return written, failed


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"
