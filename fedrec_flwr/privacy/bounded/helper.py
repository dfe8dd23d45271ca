"""The helper: the second aggregator of bounded secure aggregation, a party apart from the
server (the leader).

It holds its X25519 key pair (clients seal their report seeds for it) and, with the leader,
the verification key that clients never see. For a round it is sent, per report, the
sealed seed, the sending node's signed key, the leader's joint-randomness parts and
verifier share, and the client's claim of the helper's parts (:class:`Request`). It:

- checks each sending node's key against its identity key (the roster, as nodes check
  their peers: :class:`~fedrec_flwr.privacy.secagg_trust.Roster`), and each user against
  the public schedule (a participant of the round, held by that node, once);
- computes the round's bound itself from the public table the round trains on, when the
  bound follows the table (:class:`~fedrec_flwr.privacy.bounded.scaled.BoundSchedule`);
- opens each seed, computes its verifier share and decides with the leader's;
- answers **once per round**, and only when at least ``min_reports`` reports were accepted:
  the sum of the accepted reports' output shares (:class:`Answer`), so that the leader
  learns the sum of at least that many users and nothing of one.

The privacy of a report holds while the leader and the helper do not collude; the bounds
hold while both follow the protocol (a helper that adds to its sum is trusted not to: the
second aggregator cannot be one of the clients).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from fedrec_flwr.partition import participants
from fedrec_flwr.privacy import secagg, secagg_trust
from fedrec_flwr.privacy.bounded import field as gf
from fedrec_flwr.privacy.bounded import report as rep
from fedrec_flwr.privacy.bounded.circuit import Bounds, output_of
from fedrec_flwr.privacy.bounded.scaled import BoundSchedule, ScaleError
from fedrec_flwr.seeding import keyed_rng

HELPER_ID = secagg_trust.HELPER_ID


class HelperRefused(ValueError):  # noqa: N818 (a refusal, not a bug)
    """The helper will not answer the round (too few reports, a repeated round)."""


@dataclass(frozen=True)
class Request:
    """One report as the helper is sent it."""

    user: int
    partition: int
    node_key: np.ndarray  # the node's X25519 public key
    node_signature: np.ndarray  # its signature by the node's identity key
    node_identity: bytes | None  # the identity key the server relays (pinning only)
    sealed: bytes
    leader: rep.LeaderShare
    claimed: tuple[bytes, bytes]


@dataclass(frozen=True)
class Answer:
    """The helper's answer: its verifier share of every report it could open (by user),
    the users it accepted, and the sum of their output shares."""

    verifiers: dict[int, np.ndarray]
    accepted: tuple[int, ...]
    total: np.ndarray
    refused: dict[int, str]


@dataclass(frozen=True)
class Schedule:
    """The public schedule the helper holds reports to."""

    seed: int
    num_users: int
    fraction_train: float
    num_partitions: int
    min_reports: int


def verification_key(seed: int, source: str) -> bytes:
    """The aggregators' verification key: fresh, or keyed by the seed (``seeded``: then the
    clients can derive it too, and soundness rests on their not trying: simulation only)."""
    if source == "seeded":
        return keyed_rng(seed, "secagg-verify").bytes(32)
    return os.urandom(32)


class Helper:
    """The second aggregator (see the module's doc)."""

    def __init__(
        self,
        bounds: Bounds | BoundSchedule,
        schedule: Schedule,
        roster: secagg_trust.Roster,
        key_source: str,
        verify_key: bytes = b"",
    ) -> None:
        #: The bounds of each round (a fixed bound: its own every round).
        self.rounds = bounds if isinstance(bounds, BoundSchedule) else BoundSchedule(bounds)
        self.bounds, self.schedule, self.roster = self.rounds.ceiling, schedule, roster
        self.key = secagg.private_key(schedule.seed, HELPER_ID, key_source)
        self.identity = secagg_trust.identity_key(schedule.seed, HELPER_ID, key_source)
        self.verify_key = verify_key or verification_key(schedule.seed, key_source)
        self.answered: set[tuple[int, int]] = set()

    def public(self, run_id: int) -> dict[str, np.ndarray]:
        """Its X25519 public key, signed by its identity (what nodes check)."""
        public = secagg.public_bytes(self.key)
        told = secagg_trust.statement(run_id, HELPER_ID, public)
        return {
            "helper-key": public,
            "helper-signature": secagg_trust.sign(self.identity, told),
            "helper-identity": np.frombuffer(secagg_trust.public_identity(self.identity), np.uint8),
        }

    def answer(
        self,
        run_id: int,
        server_round: int,
        requests: list[Request],
        table: np.ndarray | None = None,
    ) -> Answer:
        """The round's answer (:class:`Answer`); refused (:class:`HelperRefused`) for a round
        answered already, with fewer than ``min_reports`` accepted, or without the round's
        public ``table`` when the bound follows it."""
        bounds = self.round_bounds(table)
        if (run_id, server_round) in self.answered:
            raise HelperRefused(
                f"round {server_round} of this run was answered already: a second sum over "
                "other reports would tell their difference"
            )
        self.answered.add((run_id, server_round))
        s = self.schedule
        chosen = set(participants(s.seed, server_round, s.num_users, s.fraction_train).tolist())
        verifiers, accepted, refused = {}, [], {}
        total = np.zeros(bounds.output_length, dtype=np.uint64)
        for request in requests:
            try:
                self._check_sender(run_id, request, chosen)
                chosen.discard(request.user)  # each user once
                verifier, share = self._verify(bounds, run_id, server_round, request)
            except (rep.ReportRefused, secagg_trust.SecureRoundRefused, ValueError) as why:
                refused[request.user] = str(why)
                continue
            verifiers[request.user] = verifier
            if rep.accepts(bounds, request.leader.verifier, verifier):
                accepted.append(request.user)
                total = gf.add(total, output_of(bounds, share))
            else:
                refused[request.user] = "the report does not verify"
        if len(accepted) < s.min_reports:
            raise HelperRefused(
                f"round {server_round}: {len(accepted)} reports verified, fewer than the "
                f"{s.min_reports} whose sum the helper may reveal"
            )
        return Answer(verifiers, tuple(accepted), total, refused)

    def round_bounds(self, table: np.ndarray | None) -> Bounds:
        """The round's bounds, computed from the public ``table`` the round trains on."""
        if self.rounds.scale <= 0:
            return self.bounds
        if table is None:
            raise HelperRefused(
                "the bound follows the table (secure-aggregation-bound-scale), and the round's "
                "table was not shown: no bound to verify against"
            )
        try:
            return self.rounds.at(table)
        except ScaleError as why:
            raise HelperRefused(str(why)) from why

    def _check_sender(self, run_id: int, request: Request, chosen: set[int]) -> None:
        if (
            request.user not in chosen
            or request.user % self.schedule.num_partitions != request.partition
        ):
            raise rep.ReportRefused(
                f"user {request.user} is not a participant of the round held by partition "
                f"{request.partition}, or it reported twice"
            )
        identity = self.roster.key_of(request.partition, request.node_identity)
        told = secagg_trust.statement(run_id, request.partition, request.node_key)
        if not secagg_trust.verifies(identity, told, request.node_signature):
            raise rep.ReportRefused(
                f"the key of partition {request.partition} is not signed by its identity key"
            )

    def _verify(self, bounds: Bounds, run_id: int, server_round: int, request: Request):
        ctx = rep.context(run_id, server_round, request.user, bounds)
        sigma = rep.open_sealed(request.sealed, self.key, request.node_key, ctx)
        verifier, expanded = rep.helper_share(
            bounds, ctx, sigma, request.leader, request.claimed, self.verify_key
        )
        return verifier, expanded.share
