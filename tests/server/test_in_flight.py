"""The message window (:mod:`fedrec_flwr.server.in_flight`): every reply comes back, never more
than the window in flight, the round timeout holds, and only the simulation engine's grid
is windowed."""

from __future__ import annotations

import random

import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from flwr.superlink.grid.inmemory_grid import InMemoryGrid

from fedrec_flwr.config import RunConfig
from fedrec_flwr.server import in_flight
from fedrec_flwr.server.in_flight import WindowedGrid, message_window, send_and_receive, windowed
from fedrec_lab.local_grid import stamp_message_id


class FakeGrid:
    """A grid whose nodes answer each message after a random number of pulls (``None``: a
    silent node never answers); notes the most messages it held at once."""

    def __init__(self, seed: int = 0, silent: frozenset[int] = frozenset()) -> None:
        self.rng = random.Random(seed)
        self.silent = silent
        self.waiting: dict[str, tuple[Message, int]] = {}
        self.most_held = 0
        self.whole_rounds = 0

    def push_messages(self, messages):
        ids = []
        for message in messages:
            message_id = stamp_message_id(message)
            pulls = None if message.metadata.dst_node_id in self.silent else self.rng.randint(0, 3)
            self.waiting[message_id] = (message, pulls)
            ids.append(message_id)
        self.most_held = max(self.most_held, len(self.waiting))
        return ids

    def pull_messages(self, message_ids):
        replies = []
        for message_id in list(message_ids):
            message, pulls = self.waiting.get(message_id, (None, None))
            if message is None or pulls is None:
                continue
            if pulls == 0:
                content = RecordDict(
                    {"config": ConfigRecord({"node": message.metadata.dst_node_id})}
                )
                replies.append(Message(content, reply_to=message))
                del self.waiting[message_id]
            else:
                self.waiting[message_id] = (message, pulls - 1)
        return replies

    def send_and_receive(self, messages, *, timeout=None):
        self.whole_rounds += 1
        ids = set(self.push_messages(messages))
        replies = []
        while ids:
            got = self.pull_messages(ids)
            ids -= {r.metadata.reply_to_message_id for r in got}
            replies.extend(got)
        return replies


def _messages(nodes: int) -> list[Message]:
    content = RecordDict({"config": ConfigRecord({"server-round": 1})})
    return [Message(content, dst_node_id=n, message_type="train") for n in range(1, nodes + 1)]


@pytest.fixture(autouse=True)
def _fast_pulls_in_a_run(monkeypatch):
    monkeypatch.setattr(in_flight, "PULL_INTERVAL", 0.0)
    for attribute, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 0)):
        monkeypatch.setattr(TaskIdentity, attribute, value)  # what a run sets in Flower


@pytest.mark.parametrize("window", [1, 3, 7, 50])
def test_every_reply_comes_back_with_at_most_the_window_in_flight(window: int) -> None:
    grid = FakeGrid(seed=window)
    replies = send_and_receive(grid, _messages(40), timeout=None, window=window)
    assert sorted(r.content["config"]["node"] for r in replies) == list(range(1, 41))
    assert grid.most_held == min(window, 40)
    assert grid.whole_rounds == (1 if window >= 40 else 0)


def test_window_zero_sends_the_round_at_once() -> None:
    grid = FakeGrid()
    replies = send_and_receive(grid, _messages(10), timeout=None, window=0)
    assert len(replies) == 10 and grid.whole_rounds == 1


class FakeClock:
    """``time`` for the module under test: ``sleep`` moves ``monotonic`` on, no time passes."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_timeout_ends_the_round_with_the_replies_so_far(monkeypatch) -> None:
    """Silent nodes hold the whole window: the round ends at the timeout (on the module's
    clock, at the first look past it), the messages never sent are not answered (the
    strategy counts them as failures)."""
    clock = FakeClock()
    monkeypatch.setattr(in_flight, "time", clock)
    monkeypatch.setattr(in_flight, "PULL_INTERVAL", 0.05)  # the fixture's 0 never moves the clock
    grid = FakeGrid(silent=frozenset({1, 2}))
    replies = send_and_receive(grid, _messages(10), timeout=0.2, window=2)
    assert 0.2 <= clock.now < 0.2 + in_flight.PULL_INTERVAL + 1e-9
    assert replies == [] and grid.most_held == 2


def test_only_the_simulation_engines_grid_is_windowed() -> None:
    fake = FakeGrid()
    assert windowed(fake, 8) is fake  # e.g. a deployment's GrpcGrid, or the in-process grid
    engine = InMemoryGrid.__new__(InMemoryGrid)
    assert isinstance(windowed(engine, 8), WindowedGrid)
    assert windowed(engine, 0) is engine
    wrapped = WindowedGrid(fake, 4)
    assert wrapped.most_held == 0  # everything else is the grid's
    assert len(wrapped.send_and_receive(_messages(9))) == 9 and fake.most_held == 4


def test_timeout_faults_send_the_round_at_once() -> None:
    assert message_window(RunConfig.from_mapping({})) == 32
    assert message_window(RunConfig.from_mapping({"max-in-flight": 0})) == 0
    timing_out = {"fault-fraction": 0.2, "fault-mode": "timeout"}
    assert message_window(RunConfig.from_mapping(timing_out)) == 0
    crashing = {"fault-fraction": 0.2, "fault-mode": "crash"}
    assert message_window(RunConfig.from_mapping(crashing)) == 32


def test_a_negative_window_is_refused_with_what_it_means() -> None:
    with pytest.raises(ValueError, match="max-in-flight=-1 must be >= 0"):
        RunConfig.from_mapping({"max-in-flight": -1})
