"""The helper as an OS process of its own (``secure-aggregation-helper = "process"``): the
leader reaches it through a pipe only, and it answers as the in-process helper does."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fedrec_flwr.config import RunConfig
from fedrec_flwr.privacy import secagg, secagg_trust
from fedrec_flwr.privacy.bounded import client, leader
from fedrec_flwr.privacy.bounded import field as gf
from fedrec_flwr.privacy.bounded import report as rep
from fedrec_flwr.privacy.bounded.circuit import Bounds
from fedrec_flwr.privacy.bounded.helper import Helper, HelperRefused, Schedule, verification_key
from fedrec_flwr.privacy.bounded.helper_process import HelperProcess
from fedrec_flwr.privacy.bounded.keys import HelperPlace
from fedrec_flwr.schema import ConfigError

SEED, RUN, ROUND, USERS = 6, 11, 3, 4
BOUNDS = Bounds.of(20, 4, 2.0)


def parts():
    schedule = Schedule(SEED, USERS, 1.0, USERS, 2)
    return BOUNDS, schedule, secagg_trust.Roster(SEED, "seeded"), "seeded"


@pytest.fixture(scope="module")
def process():
    helper = HelperProcess(*parts(), verification_key(SEED, "seeded"))
    yield helper
    helper.close()


def reports(helper_public: np.ndarray, server_round: int) -> list[tuple[rep.Report, leader.Sender]]:
    rng = np.random.default_rng(server_round)
    out = []
    for user in range(USERS):
        own = secagg.private_key(SEED, user, "seeded")
        public = secagg.public_bytes(own)
        identity = secagg_trust.identity_key(SEED, user, "seeded")
        signature = secagg_trust.sign(identity, secagg_trust.statement(RUN, user, public))
        (report,) = client.user_reports(
            BOUNDS,
            lambda u: rep.context(RUN, server_round, u, BOUNDS),
            [user],
            [(np.array([user, user + 5]), rng.normal(size=(2, 4)))],
            10,
            1.0,
            seed=SEED,
            source="seeded",
            server_round=server_round,
            own=own,
            helper_public=helper_public,
        )
        out.append((report, leader.Sender(user, public, signature)))
    return out


def test_the_helpers_process_answers_as_the_helper_does(process):
    """Another process (its own pid), whose answer is the in-process helper's bit for bit;
    what the leader holds of it has no private key."""
    told = process.public(RUN)
    here = Helper(*parts())
    assert bytes(told["helper-key"]) == bytes(here.public(RUN)["helper-key"])
    assert process.process.pid != os.getpid() and process.process.is_alive()
    assert not hasattr(process, "key") and not hasattr(process, "identity")
    pairs = reports(told["helper-key"], ROUND)
    away = leader.aggregate(BOUNDS, RUN, ROUND, pairs, process.answer, process.verify_key)
    near = leader.aggregate(BOUNDS, RUN, ROUND, pairs, here.answer, here.verify_key)
    assert away.accepted == near.accepted == tuple(range(USERS))
    np.testing.assert_array_equal(away.changes, near.changes)


def test_the_helpers_process_refuses_what_the_helper_refuses(process):
    """A tampered share is refused and the others aggregate; a round answered already is
    refused with the helper's reason."""
    pairs = reports(process.public(RUN)["helper-key"], ROUND + 1)
    share = pairs[0][0].share.copy()
    share[0] = gf.add(share[0], 1 << 20).item()
    tampered = [(rep.Report(0, share, *_rest(pairs[0][0])), pairs[0][1]), *pairs[1:]]
    total = leader.aggregate(BOUNDS, RUN, ROUND + 1, tampered, process.answer, process.verify_key)
    assert total.accepted == (1, 2, 3) and 0 in total.refused
    with pytest.raises(leader.RoundVoid, match="answered already"):
        leader.aggregate(BOUNDS, RUN, ROUND + 1, pairs, process.answer, process.verify_key)


def _rest(report: rep.Report):
    return report.proof, report.blind, report.helper_parts, report.sealed


def test_a_stopped_helper_process_refuses_every_round():
    helper = HelperProcess(*parts(), verification_key(SEED, "seeded"))
    helper.close()
    assert not helper.process.is_alive()
    with pytest.raises(HelperRefused, match="not running"):
        helper.answer(RUN, ROUND, [])


def test_the_helpers_place_needs_a_bound():
    with pytest.raises(ConfigError, match="set secure-aggregation-bound"):
        RunConfig.from_mapping(
            {"secure-aggregation": True, "secure-aggregation-helper": HelperPlace.PROCESS.value}
        )


def test_the_server_starts_the_helper_where_the_key_says():
    from fedrec_flwr.privacy.bounded.scaled import BoundSchedule
    from fedrec_flwr.server.bounded_rounds import BoundedRounds

    keys = {"secure-aggregation": True, "secure-aggregation-bound": 2.0}
    for place, kind in ((HelperPlace.IN_PROCESS, Helper), (HelperPlace.PROCESS, HelperProcess)):
        config = RunConfig.from_mapping({**keys, "secure-aggregation-helper": place.value})
        rounds = BoundedRounds(BoundSchedule(BOUNDS), config, USERS, USERS)
        assert isinstance(rounds.helper, kind)
        if kind is HelperProcess:
            assert rounds.helper.public(RUN)["helper-key"].shape == (32,)
            rounds.helper.close()
