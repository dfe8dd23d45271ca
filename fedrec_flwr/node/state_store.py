"""A node's private state on disk (:class:`~fedrec_flwr.node.state.NodeState`), so a restarted
SuperNode or a resumed run continues with it. Flower's ``context.state`` lives only as long as
the SuperNode process of one run. The folder:

- ``<state-dir>/<run-key>/`` when the node config names a ``state-dir`` (deployment:
  ``--node-config "partition-id=0 num-partitions=3 state-dir='/var/lib/fedrec'"``), holding
  ``partition-<p>.npz``, the latest state, rewritten after every training round;
- else the run's checkpoint folder, ``<run-dir>/checkpoint/``, that the server names
  (simulation: the nodes share the server's disk);

and in either, ``round-<r>/partition-<p>.npz``, the state after round ``r``, written when the
server checkpoints round ``r`` (:mod:`fedrec_flwr.server.checkpoint`). Files are written atomically
and tagged with what they belong to: run key (one per run, kept on resume), session (one per
start of the ServerApp), partition, the run configuration (:func:`fingerprinted_config`), the
node's data fingerprint and the round written after. A file whose tag does not fit, or newer
than the round asked for, is refused (:class:`StateMismatchError`), never used.

The server sends ``run-key``, ``session``, ``restore-round`` (the checkpoint this start
resumed from, 0 if none) and ``checkpoint-dir`` with every train, evaluate and checkpoint
message; without them (a strategy driven by hand) the state stays in memory, as before.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context, Message

from fedrec_flwr import atomic
from fedrec_flwr.messages import (
    BEST_STATE,
    CHECKPOINT_DIR,
    CONFIG,
    RESTORE_ROUND,
    RUN_KEY,
    SESSION,
    config_record,
    int_value,
)
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.node.state import NodeState
from fedrec_flwr.resume import differing_keys, fingerprinted_config

STATE_DIR = "state-dir"  # node-config key
FORMAT = 1


class StateMismatchError(RuntimeError):
    """A state file on disk belongs to another run, partition, configuration or data, or to
    a later round than the one asked for; or it cannot be read."""


@functools.lru_cache(maxsize=8)
def data_fingerprint(runtime: NodeRuntime) -> str:
    """sha256 of the node's users and their rows (train, validation, test) and the catalogue
    size: a state written for other data is refused."""
    prepared = runtime.prepared
    digest = hashlib.sha256(np.array([prepared.num_items, len(runtime.users)], np.int64).tobytes())
    digest.update(np.asarray(runtime.users, np.int64).tobytes())
    for user in runtime.users:
        digest.update(np.asarray(prepared.train_positives(int(user)), np.int64).tobytes())
        held_out = [prepared.valid_item[user], prepared.test_item[user]]
        digest.update(np.array(held_out, np.int64).tobytes())
    return digest.hexdigest()[:16]


def read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    try:
        return atomic.load_tagged(path)
    except ValueError as error:
        raise StateMismatchError(str(error)) from error


class NodeStateStore:
    """The state files of one node (partition) of one run."""

    def __init__(
        self,
        folder: Path,
        runtime: NodeRuntime,
        config: Mapping[str, Any],
        keeps_latest: bool = False,
    ) -> None:
        self.folder = Path(folder)
        self.runtime = runtime
        #: a ``state-dir`` store also keeps the latest state (see the module's doc)
        self.keeps_latest = keeps_latest
        self.run_key = str(config[RUN_KEY])
        self.session = str(config[SESSION])
        self.restore_round = int(config.get(RESTORE_ROUND, 0))
        self.name = f"partition-{runtime.partition_id}.npz"

    @classmethod
    def of(
        cls, node_config: Mapping[str, Any], runtime: NodeRuntime, config: Mapping[str, Any]
    ) -> NodeStateStore | None:
        """The store a message implies: ``<state-dir>/<run-key>`` with a node-config
        ``state-dir``, else the checkpoint folder the server named; None without either, or
        when the message carries no run key."""
        if RUN_KEY not in config:
            return None
        if node_config.get(STATE_DIR):
            folder = Path(str(node_config[STATE_DIR])).expanduser() / str(config[RUN_KEY])
            return cls(folder, runtime, config, keeps_latest=True)
        if config.get(CHECKPOINT_DIR):
            return cls(Path(str(config[CHECKPOINT_DIR])), runtime, config)
        return None

    def latest_path(self) -> Path:
        return self.folder / self.name

    def round_path(self, server_round: int) -> Path:
        return self.folder / f"round-{server_round}" / self.name

    # ------------------------------------------------------------------ write
    def tag(self, after_round: int) -> dict[str, Any]:
        config = self.runtime.config
        return {
            "format": FORMAT,
            "run-key": self.run_key,
            "session": self.session,
            "after-round": int(after_round),
            "partition-id": self.runtime.partition_id,
            "num-partitions": self.runtime.num_partitions,
            "run-name": config.outputs.run_name,
            "method": config.method_name,
            "dataset": config.data.dataset,
            "seed": config.training.seed,
            "config": fingerprinted_config(config),
            "data": data_fingerprint(self.runtime),
            "written": time.strftime("%Y-%m-%d %H:%M:%S"),
        }

    def write(self, path: Path, state: NodeState, after_round: int) -> int:
        return atomic.savez_tagged(path, self.tag(after_round), state.compacted().to_arrays())

    def save_latest(self, state: NodeState, after_round: int) -> int:
        return self.write(self.latest_path(), state, after_round)

    def save_round(self, state: NodeState, server_round: int, keep: set[int]) -> int:
        """Write the state after ``server_round``; drop this node's files of the other rounds
        except those in ``keep`` (the checkpoint the server last committed)."""
        written = self.write(self.round_path(server_round), state, server_round)
        for old in self.folder.glob(f"round-*/{self.name}"):
            number = old.parent.name.removeprefix("round-")
            if number.isdigit() and int(number) not in keep | {server_round}:
                old.unlink(missing_ok=True)
        return written

    # ------------------------------------------------------------------- read
    def check(self, tag: Mapping[str, Any], path: Path) -> None:
        """Refuse a file written for another run, partition, configuration or data."""
        ours = self.tag(0)
        changed = "; ".join(differing_keys(tag.get("config", {}), ours["config"]))
        theirs = (tag.get("partition-id"), tag.get("num-partitions"))
        mine = (ours["partition-id"], ours["num-partitions"])
        checks = [
            (tag.get("format") == FORMAT, f"its format is {tag.get('format')}, not {FORMAT}"),
            (tag.get("run-key") == self.run_key, f"it belongs to run {tag.get('run-key')!r}"),
            (
                theirs == mine,
                f"it was written by partition {theirs[0]} of {theirs[1]}, this node is "
                f"partition {mine[0]} of {mine[1]} (give each node the partition it had)",
            ),
            (not changed, f"it was written under another run configuration ({changed})"),
            (
                tag.get("data") == ours["data"],
                f"it was written for other data (fingerprint {tag.get('data')}, this node's "
                f"{ours['data']}: its users or their rows changed)",
            ),
        ]
        for ok, why in checks:
            if not ok:
                raise StateMismatchError(f"node state {path} refused: {why}")

    def load(self, path: Path) -> tuple[dict[str, Any], NodeState]:
        tag, arrays = read(path)
        self.check(tag, path)
        return tag, NodeState.from_arrays(arrays)

    def load_round(self, server_round: int) -> NodeState:
        """The state after ``server_round`` (a checkpoint's); refused if missing or other."""
        path = self.round_path(server_round)
        if not path.exists():
            raise StateMismatchError(
                f"no node state of round {server_round} for partition "
                f"{self.runtime.partition_id} at {path}: the checkpoint cannot be resumed on "
                "this node (was its state-dir changed or emptied?)"
            )
        tag, state = self.load(path)
        if tag["after-round"] != server_round:
            raise StateMismatchError(
                f"node state {path} was written after round {tag['after-round']}, the "
                f"checkpoint is of round {server_round}"
            )
        return state

    def load_latest(self, max_round: int) -> NodeState | None:
        """The latest state this node saved in the current run (its SuperNode restarted
        mid-run), or None when there is none; refused if written after ``max_round``."""
        path = self.latest_path()
        if not self.keeps_latest or not path.exists():
            return None
        tag, arrays = read(path)
        if tag.get("session") != self.session:
            return None  # an earlier start of this run: its checkpoint state applies
        self.check(tag, path)
        if tag["after-round"] > max_round:
            raise StateMismatchError(
                f"node state {path} was written after round {tag['after-round']}, newer than "
                f"round {max_round} that this message expects"
            )
        return NodeState.from_arrays(arrays)

    def recover(self, max_round: int) -> NodeState | None:
        """The state a node with an empty ``context.state`` continues from, or None for a
        fresh one (see :func:`recover`)."""
        state = self.load_latest(max_round)
        if state is not None:
            return state
        if self.restore_round == 0:
            return None
        if self.keeps_latest:  # not trained since the resume: the checkpoint's state
            return self.load_round(self.restore_round)
        raise StateMismatchError(
            f"partition {self.runtime.partition_id} lost its private state (its SuperNode "
            f"restarted after the run resumed from round {self.restore_round}) and has no "
            "state-dir to reload it from: give the SuperNode a state-dir node config"
        )


# --- what the ClientApp calls (fedrec_flwr/client_app.py) ----------------------------------------


def recover(context: Context, runtime: NodeRuntime, msg: Message, max_round: int):
    """The state of a node whose ``context.state`` is empty, or None (a fresh node).

    With a ``state-dir``: the latest state this node saved in the current run, else (a resumed
    run the node has not trained in yet) the checkpoint's. Without one a fresh node is a fresh
    node, unless the run was resumed: the state the resume restored was lost, which is refused.
    """
    store = NodeStateStore.of(context.node_config, runtime, msg.content[CONFIG])
    return None if store is None else store.recover(max_round)


def persist_latest(context: Context, runtime: NodeRuntime, msg: Message, state, after_round):
    """After training: with a ``state-dir``, rewrite the node's latest state."""
    store = NodeStateStore.of(context.node_config, runtime, msg.content[CONFIG])
    if store is not None and store.keeps_latest:
        store.save_latest(state, after_round)


def write_checkpoint(context: Context, runtime: NodeRuntime, msg: Message, state) -> int:
    """The server checkpoints round ``server-round``: write the state after it (keeping the
    files of ``committed-round``, the checkpoint it last committed); the bytes written. With
    ``best-state`` (``keep-best-state``) into the best round's folder."""
    config = config_record(msg.content)
    keep = {int_value(config, "committed-round", 0)}
    store = _store(context, runtime, msg)
    if config.get(BEST_STATE) and store.keeps_latest:  # a state-dir: its best-state/ folder
        store = NodeStateStore(store.folder / BEST_STATE, runtime, config, keeps_latest=True)
    return store.save_round(state, int_value(config, "server-round"), keep)


def restore(context: Context, runtime: NodeRuntime, msg: Message) -> NodeState:
    """A resumed run starts: the state after its checkpoint round ``restore-round``."""
    return _store(context, runtime, msg).load_round(
        int_value(config_record(msg.content), RESTORE_ROUND)
    )


def _store(context: Context, runtime: NodeRuntime, msg: Message) -> NodeStateStore:
    store = NodeStateStore.of(context.node_config, runtime, msg.content[CONFIG])
    if store is None:
        raise StateMismatchError(
            f"partition {runtime.partition_id} has nowhere to keep its state: the message "
            "names no checkpoint-dir and the node config no state-dir"
        )
    return store
