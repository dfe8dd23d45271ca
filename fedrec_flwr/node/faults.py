"""Fault injection for simulation: nodes that crash or miss the round timeout.

With ``fault-fraction = f`` every node sent a train message fails that round with
probability ``f``, drawn from a generator keyed by (seed, round, partition-id): the same
nodes fail in every run of a configuration, whatever process or Ray worker runs them, and
each node decides alone (it needs no list of the others). A failing node does not train (its
private state stays as it was) and:

- ``crash``: the ClientApp raises; the reply arrives as an error;
- ``timeout``: the ClientApp answers only after ``round-timeout`` (plus a margin), so the
  server has stopped waiting: its reply is missing. Every round with a failing node then
  lasts the full timeout: pair this mode with a small ``round-timeout``, and in the Flower
  simulation with enough Ray workers (nodes queued behind a sleeping one miss it too).

The strategy aggregates the others and counts both kinds as ``train-failures``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from fedrec_flwr.config import RunConfig
from fedrec_flwr.seeding import keyed_rng

#: Seconds past ``round-timeout`` that a timing-out node waits before it answers.
TIMEOUT_OVERSHOOT = 0.5


class InjectedFault(RuntimeError):  # noqa: N818 (a fault, not an error of the code)
    """A fault injected on purpose (``fault-fraction``)."""


def node_fails(seed: int, server_round: int, partition_id: int, fraction: float) -> bool:
    """Does node ``partition_id`` fail in ``server_round``? (probability ``fraction``)"""
    if fraction <= 0.0:
        return False
    return bool(keyed_rng(seed, "faults", server_round, partition_id).random() < fraction)


def failing_partitions(
    config: RunConfig, server_round: int, partitions: Iterable[int]
) -> list[int]:
    """The partitions among ``partitions`` that fail in ``server_round``."""
    return [
        p
        for p in partitions
        if node_fails(config.training.seed, server_round, p, config.faults.fault_fraction)
    ]


def inject_fault(
    config: RunConfig,
    server_round: int,
    partition_id: int,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Fail as configured if this node is drawn to fail this round; else return at once."""
    if not node_fails(
        config.training.seed, server_round, partition_id, config.faults.fault_fraction
    ):
        return
    if config.faults.fault_mode == "timeout":
        sleep(config.execution.round_timeout + TIMEOUT_OVERSHOOT)
        raise InjectedFault(
            f"injected timeout: node {partition_id} answered round {server_round} after "
            f"round-timeout={config.execution.round_timeout:g} s (fault-fraction)"
        )
    raise InjectedFault(
        f"injected crash: node {partition_id} failed round {server_round} (fault-fraction)"
    )
