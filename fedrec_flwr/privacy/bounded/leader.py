"""The leader's side of a bounded round (the server): verify each report with the helper,
drop the refused ones, and decode the sum of the rest.

:func:`aggregate` takes the round's reports with the key of the node that sent each (as
the handshake gave it). A malformed report, one the helper cannot open or attribute to a
participant of the public schedule, or one whose verifier message is refused, is
*refused*: its user is dropped (named in :attr:`RoundSum.refused` with the reason) and
the others aggregate as if it never came. The helper answers with the sum of the reports
it accepted; the leader adds its own shares of the same reports (it decides each report
itself from both verifier shares, and a disagreement with the helper voids the round).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fedrec_flwr.privacy.bounded import field as gf
from fedrec_flwr.privacy.bounded import report as rep
from fedrec_flwr.privacy.bounded.circuit import Bounds, output_of
from fedrec_flwr.privacy.bounded.encoding import Aggregate, decode
from fedrec_flwr.privacy.bounded.helper import Answer, Request


class RoundVoid(ValueError):  # noqa: N818 (a verdict on the round)
    """The round's sum cannot be had: the helper refused, or the aggregators disagree."""


@dataclass(frozen=True)
class Sender:
    """A node's X25519 key as its handshake gave it, signed by its identity key."""

    partition: int
    key: np.ndarray
    signature: np.ndarray
    identity: bytes | None = None


@dataclass(frozen=True)
class RoundSum:
    """The accepted reports' sum: the users' changes of each row (float64), how many users
    changed each row, the user, sample and loss totals; who was accepted and refused."""

    changes: np.ndarray
    counts: np.ndarray
    users: int
    samples: int
    loss: float
    accepted: tuple[int, ...]
    refused: dict[int, str] = field(default_factory=dict)  # users with a refused report


#: The helper as the leader reaches it: (run id, round, requests) -> its answer.
HelperLink = Callable[[int, int, list[Request]], Answer]


def _requests(bounds, run_id, server_round, reports, verify_key):
    """(the leader's share of each user's first well-formed report, the helper's requests,
    the refused users with why)."""
    refused: dict[int, str] = {}
    requests, mine = [], {}
    for report, sender in reports:
        if report.user in mine:  # the first report of a user counts, a second is refused
            refused[report.user] = "a second report of this user in the round"
            continue
        ctx = rep.context(run_id, server_round, report.user, bounds)
        try:
            share = rep.leader_share(bounds, ctx, report, verify_key)
        except (rep.ReportRefused, ValueError) as why:
            refused[report.user] = str(why)
            continue
        mine[report.user] = (report, share)
        requests.append(
            Request(
                report.user,
                sender.partition,
                sender.key,
                sender.signature,
                sender.identity,
                report.sealed,
                share,
                report.helper_parts,
            )
        )
    return mine, requests, refused


def _decoded(bounds: Bounds, server_round: int, total: np.ndarray, users: int) -> Aggregate:
    """The sum of ``users`` accepted reports decoded (void when it is not theirs)."""
    values = decode(bounds, total)
    counts = values["counts"]
    if values["users"] != users or counts.min(initial=0) < 0 or counts.max(initial=0) > users:
        raise RoundVoid(
            f"round {server_round}: the sum of {users} verified reports decodes to "
            f"{values['users']} users: the helper's sum is not theirs"
        )
    return values


def aggregate(
    bounds: Bounds,
    run_id: int,
    server_round: int,
    reports: Sequence[tuple[rep.Report, Sender]],
    helper: HelperLink,
    verify_key: bytes,
) -> RoundSum:
    """The round's sum over the reports that verify (see the module's doc)."""
    mine, requests, refused = _requests(bounds, run_id, server_round, reports, verify_key)
    try:
        answer = helper(run_id, server_round, requests)
    except ValueError as why:
        raise RoundVoid(f"round {server_round}: the helper refused: {why}") from why
    refused.update(answer.refused)
    accepted = sorted(
        user
        for user, verifier in answer.verifiers.items()
        if user in mine and rep.accepts(bounds, mine[user][1].verifier, verifier)
    )
    if accepted != sorted(answer.accepted):
        raise RoundVoid(
            f"round {server_round}: the helper accepted {len(answer.accepted)} reports, the "
            f"leader {len(accepted)} of the same: the aggregators disagree"
        )
    total = answer.total
    for user in accepted:
        total = gf.add(total, output_of(bounds, mine[user][0].share))
    values = _decoded(bounds, server_round, total, len(accepted))
    return RoundSum(
        values["changes"],
        values["counts"].astype(np.int64),
        values["users"],
        values["samples"],
        values["loss"],
        tuple(accepted),
        refused,
    )
