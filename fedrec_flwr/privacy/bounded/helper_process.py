"""The helper as an OS process of its own (``secure-aggregation-helper = "process"``).

:class:`HelperProcess` starts a :class:`~fedrec_flwr.privacy.bounded.helper.Helper` in a
child process (``spawn``: nothing of the parent's memory is inherited) and reaches it only
through a pipe: the leader sends the round's requests (each report's sealed seed, the
sender's signed key, the leader's verifier share) and the public table, and receives the
helper's answer (:class:`~fedrec_flwr.privacy.bounded.helper.Answer`: its verifier shares,
the users it accepted and the sum of their output shares) or its refusal. The helper's
X25519 private key, from which every report's share opens, is made in the child and never
leaves it; the parent holds the verification key both aggregators share. A refusal comes
back as :class:`~fedrec_flwr.privacy.bounded.helper.HelperRefused` with the helper's reason.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from fedrec_flwr.privacy import secagg_trust
from fedrec_flwr.privacy.bounded.circuit import Bounds
from fedrec_flwr.privacy.bounded.helper import Answer, Helper, HelperRefused, Request, Schedule
from fedrec_flwr.privacy.bounded.scaled import BoundSchedule

#: Seconds the leader waits for the helper's answer before the round is void.
ANSWER_TIMEOUT = 600.0


def _serve(
    connection: Connection,
    bounds: Bounds | BoundSchedule,
    schedule: Schedule,
    roster: secagg_trust.Roster,
    key_source: str,
    verify_key: bytes,
) -> None:
    """The child's loop: one message in, one reply out, until ``stop`` or the pipe closes."""
    helper = Helper(bounds, schedule, roster, key_source, verify_key)
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        kind, args = message[0], message[1:]
        if kind == "stop":
            return
        try:
            if kind == "public":
                reply: Any = helper.public(*args)
            elif kind == "answer":
                reply = helper.answer(*args)
            else:
                raise ValueError(f"the helper does not know '{kind}'")
        except ValueError as why:  # a refusal, sent back as one
            connection.send((False, str(why)))
        else:
            connection.send((True, reply))


class HelperProcess:
    """A :class:`Helper` in a process of its own (see the module's doc); the same calls."""

    def __init__(
        self,
        bounds: Bounds | BoundSchedule,
        schedule: Schedule,
        roster: secagg_trust.Roster,
        key_source: str,
        verify_key: bytes,
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(child, bounds, schedule, roster, key_source, verify_key),
            name="fedrec-helper",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.verify_key = verify_key

    def public(self, run_id: int) -> dict[str, np.ndarray]:
        """Its X25519 public key, signed by its identity (what nodes check)."""
        return self._call("public", run_id)

    def answer(
        self,
        run_id: int,
        server_round: int,
        requests: list[Request],
        table: np.ndarray | None = None,
    ) -> Answer:
        """The round's answer, computed in the helper's process."""
        return self._call("answer", run_id, server_round, requests, table)

    def close(self) -> None:
        """Stop the helper's process."""
        if self.process.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self._connection.send(("stop",))
            self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self._connection.close()

    def _call(self, *message: Any) -> Any:
        if not self.process.is_alive():
            raise HelperRefused("the helper's process is not running")
        self._connection.send(message)
        if not self._connection.poll(ANSWER_TIMEOUT):
            raise HelperRefused(f"the helper did not answer within {ANSWER_TIMEOUT:g} s")
        try:
            ok, value = self._connection.recv()
        except EOFError as why:
            raise HelperRefused("the helper's process ended without answering") from why
        if not ok:
            raise HelperRefused(value)
        return value
