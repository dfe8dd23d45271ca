"""Send a round's messages with at most ``window`` of them in flight at once.

Flower 1.42's simulation engine polls its in-memory link state every 0.1 s: for each node
it scans the messages stored (:meth:`InMemoryLinkState.get_message_ins`), so one sweep costs
nodes x messages stored, and a message stays stored until its reply is pulled. Pushing a
round of 943 messages at once makes a sweep ~900,000 checks on the simulation process's
one thread, which then leaves the Ray workers waiting. Keeping a window of messages in
flight (a new one pushed as each reply is pulled) keeps the sweep short; the replies are
the same, in the order they arrive (callers that care sort them, as Flower's do not order
them either).

In deployment each SuperNode pulls its own message and the devices work side by side:
:func:`windowed` leaves any grid but the simulation engine's as it is.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from fedrec_flwr.config import RunConfig

PULL_INTERVAL = 0.02  # seconds between pulls while replies are awaited


def send_and_receive(
    grid: Grid, messages: Iterable[Message], *, timeout: float | None, window: int
) -> list[Message]:
    """The replies to ``messages`` (those that came back within ``timeout`` seconds of the
    call, as :meth:`Grid.send_and_receive`), with at most ``window`` messages in flight;
    ``window`` 0, or one at least the number of messages, pushes them all at once."""
    pending: Sequence[Message] = list(messages)
    if window <= 0 or window >= len(pending):
        return list(grid.send_and_receive(pending, timeout=timeout))
    deadline = None if timeout is None else time.monotonic() + timeout
    in_flight: set[str] = set(grid.push_messages(pending[:window]))
    next_index = window
    replies: list[Message] = []
    while in_flight or next_index < len(pending):
        pulled = list(grid.pull_messages(in_flight)) if in_flight else []
        for reply in pulled:
            in_flight.discard(reply.metadata.reply_to_message_id)
        replies.extend(pulled)
        room = window - len(in_flight)
        if room > 0 and next_index < len(pending):
            batch = pending[next_index : next_index + room]
            in_flight.update(grid.push_messages(batch))
            next_index += len(batch)
        if deadline is not None and time.monotonic() >= deadline:
            break
        if not pulled:
            time.sleep(PULL_INTERVAL)
    return replies


def message_window(config: RunConfig) -> int:
    """The most messages in flight at once (simulation; 0 = a round at once): ``max-in-flight``,
    but 0 under ``timeout`` faults, whose silent nodes would hold the window until the round
    times out."""
    timing_out = config.faults.fault_fraction > 0 and config.faults.fault_mode == "timeout"
    return 0 if timing_out else config.execution.max_in_flight


class WindowedGrid:
    """``grid`` whose :meth:`send_and_receive` keeps at most ``window`` messages in flight;
    everything else is ``grid``'s."""

    def __init__(self, grid: Grid, window: int) -> None:
        self.grid = grid
        self.window = window

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        return send_and_receive(self.grid, messages, timeout=timeout, window=self.window)

    def __getattr__(self, name: str):
        return getattr(self.grid, name)


def windowed(grid: Grid, window: int) -> Grid:
    """``grid`` with at most ``window`` messages in flight if it is the simulation engine's
    (Flower's ``InMemoryGrid``) and ``window`` > 0; else ``grid`` itself."""
    if window > 0 and isinstance(grid, InMemoryGrid):
        return WindowedGrid(grid, window)  # type: ignore[return-value]
    return grid
