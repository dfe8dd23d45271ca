"""Where a deployed node's seconds go, message by message (``fedrec deploy-local --timings``).

When ``$FEDREC_NODE_TIMINGS`` names a file, the ClientApp appends one JSON line per message
to it: the absolute times (``time.time()``) at which the process started, the ClientApp got
the message (after Python, the imports and Flower pulling the message, context and app from
the SuperNode), its data and runtime were ready (``node_runtime``: our data load and setup)
and the reply was built (our train or evaluate, private state included). What happens before
the process starts (the SuperNode and SuperExec polling) and after the reply (pushing it, the
server polling for it) is Flower's; :func:`summarise` puts the two sides together.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

ENV = "FEDREC_NODE_TIMINGS"


def process_started() -> float | None:
    """This process's start time (seconds since the epoch; Linux ``/proc`` only)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def timing_mod(setup: Callable) -> Callable:
    """A ClientApp mod that times ``setup(context)`` and the handler, and appends the line."""

    def mod(message, context, call_next):
        entry = time.time()
        with contextlib.suppress(Exception):  # the handler meets it again and answers
            setup(context)
        ready = time.time()
        reply = call_next(message, context)
        record = {
            "kind": message.metadata.message_type,
            "round": int(message.content["config"].get("server-round", 0))
            if "config" in message.content
            else 0,
            "node": str(context.node_config.get("data-path", context.node_id)),
            "process-start": process_started(),
            "entry": entry,
            "ready": ready,
            "end": time.time(),
        }
        with open(os.environ[ENV], "a") as f:
            f.write(json.dumps(record) + "\n")
        return reply

    return mod


def mods(setup: Callable) -> list[Callable]:
    """The ClientApp's mods: the timing mod when ``$FEDREC_NODE_TIMINGS`` is set."""
    return [timing_mod(setup)] if os.environ.get(ENV) else []


def summarise(lines: list[dict], round_seconds: dict[int, float]) -> list[dict]:
    """Per round: wall seconds (``rounds.csv``), and of each phase (train, then evaluate) the
    slowest node's process start (Python, imports, Flower handing over the message), our setup
    (data load, runtime) and our work; ``flower`` is the rest (polling, transfers, server)."""
    out = []
    for server_round, wall in sorted(round_seconds.items()):
        row = {"round": server_round, "wall": wall, "start": 0.0, "setup": 0.0, "work": 0.0}
        for kind in ("train", "evaluate"):
            mine = [r for r in lines if r["round"] == server_round and r["kind"] == kind]
            if not mine:
                continue
            row["start"] += max(r["entry"] - (r["process-start"] or r["entry"]) for r in mine)
            row["setup"] += max(r["ready"] - r["entry"] for r in mine)
            row["work"] += max(r["end"] - r["ready"] for r in mine)
        row["flower"] = wall - row["start"] - row["setup"] - row["work"]
        out.append(row)
    return out
