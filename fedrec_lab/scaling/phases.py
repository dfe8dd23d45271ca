"""Where a node's round time goes: a clock of exclusive wall and CPU seconds per (round,
phase), and the timers it puts around the node's phases (``bench/profile_round.py``'s phase
table, ``bench/launch_counts.py``'s CPU seconds by phase)."""

from __future__ import annotations

import importlib
import resource
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: The node's phases the clock times: (module, attribute, phase). The attribute is looked up
#: where its callers look it up, a module's function or a class's method (``Class.method``);
#: phases of one name add up.
NODE_PHASES: tuple[tuple[str, str, str], ...] = (
    ("fedrec_flwr.node.runtime", "round_draws", "sampling (negatives)"),
    ("fedrec_flwr.node.samples", "user_round_items", "sampling (negatives)"),
    ("fedrec_flwr.node.runtime", "build_round_samples", "rows of the round (build_round_samples)"),
    ("fedrec_flwr.node.training", "epoch_steps", "batch plan (epoch_steps)"),
    ("fedrec_flwr.node.runtime", "local_update", "training loop (tensor kernels)"),
    ("fedrec_flwr.node.upload", "summed_upload", "upload (summed_upload)"),
    ("fedrec_flwr.node.runtime", "NodeRuntime.train", "node train: look-ups, copies, state"),
    ("fedrec_flwr.node.evaluate", "NodeEvaluation.evaluate_users", "evaluation"),
)


class PhaseClock:
    """Exclusive wall and CPU seconds per (round, phase): entering a phase pauses the one
    it runs inside."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every figure (a new run)."""
        self.wall: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.cpu: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.stack: list[str] = []
        self.round = 0
        self.round_starts: dict[int, tuple[float, float]] = {}
        self.round_usage: dict[int, tuple[float, int]] = {}  # kernel seconds, page faults
        self.mark = (time.perf_counter(), time.process_time())

    def charge(self) -> None:
        """Add the seconds since the last charge to the phase running now (if any)."""
        now = (time.perf_counter(), time.process_time())
        if self.stack:
            self.wall[self.round][self.stack[-1]] += now[0] - self.mark[0]
            self.cpu[self.round][self.stack[-1]] += now[1] - self.mark[1]
        self.mark = now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as ``name`` (the phase it runs inside paused meanwhile)."""
        self.charge()
        self.stack.append(name)
        try:
            yield
        finally:
            self.charge()
            self.stack.pop()

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        """Time ``owner.attribute`` (a module's function or a class's method) as ``name``."""
        inner: Callable[..., Any] = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return inner(*args, **kwargs)

        setattr(owner, attribute, timed)

    def enter_round(self, server_round: int) -> None:
        """Charge what follows to ``server_round`` (from its first call on)."""
        if server_round > 0 and server_round not in self.round_starts:
            self.charge()
            self.round = server_round
            self.round_starts[server_round] = (time.perf_counter(), time.process_time())
            self.round_usage[server_round] = kernel_usage()


def kernel_usage() -> tuple[float, int]:
    """The process's kernel (system) CPU seconds and minor page faults so far: the part of
    its CPU seconds spent in the kernel, much of it first touches of fresh memory."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_stime, usage.ru_minflt


def phase_target(module: str, attribute: str) -> tuple[Any, str]:
    """The object holding a phase's attribute (the module, or the class of ``Class.method``)
    and the attribute's own name."""
    owner: Any = importlib.import_module(module)
    *classes, name = attribute.split(".")
    for part in classes:
        owner = getattr(owner, part)
    return owner, name


def instrument(clock: PhaseClock) -> None:
    """Put the clock's timers around the node's phases (:data:`NODE_PHASES`), for the rest of
    the process."""
    for module, attribute, name in NODE_PHASES:
        clock.wrap(*phase_target(module, attribute), name)
