"""A bound that follows the table (``secure-aggregation-bound-scale``): each round's bound is
computed from the public table by the node, the server and the helper; a report proven
against another bound is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrec_flwr.config import RunConfig
from fedrec_flwr.privacy import secagg, secagg_trust
from fedrec_flwr.privacy.bounded import client, leader
from fedrec_flwr.privacy.bounded import report as rep
from fedrec_flwr.privacy.bounded.circuit import Bounds
from fedrec_flwr.privacy.bounded.helper import Helper, Schedule
from fedrec_flwr.privacy.bounded.keys import round_bounds
from fedrec_flwr.privacy.bounded.scaled import QUANTUM, BoundSchedule, ScaleError
from fedrec_flwr.schema import ConfigError

SEED, RUN, ROUND, USERS = 4, 9, 2, 4
ITEMS, DIM, CEILING = 30, 4, 8.0


def table_of(norms) -> np.ndarray:
    """A table whose rows have the given norms."""
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(len(norms), DIM))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)) * np.reshape(norms, (-1, 1))


@pytest.fixture(scope="module")
def schedule() -> BoundSchedule:
    return BoundSchedule(Bounds.of(ITEMS, DIM, CEILING), scale=4.0, floor=0.5)


def test_the_bound_follows_the_tables_median_row_norm(schedule):
    small = table_of(np.linspace(0.1, 0.5, ITEMS))  # median 0.3: 4 x 0.3 = 1.2
    want = math.floor(4.0 * float(np.median(np.linalg.norm(small, axis=1))) / QUANTUM) * QUANTUM
    assert schedule.bound_of(small) == want and 1.19 < want <= 1.2
    assert schedule.bound_of(table_of(np.full(ITEMS, 0.01))) == 0.5  # the floor
    assert schedule.bound_of(table_of(np.full(ITEMS, 100.0))) == CEILING  # the ceiling
    bounds = schedule.at(small)
    assert bounds.bound == want and bounds.frac_bits == schedule.ceiling.frac_bits
    assert bounds.exact() and bounds.digest() != schedule.ceiling.digest()
    fixed = BoundSchedule(schedule.ceiling)
    assert fixed.at(small) is schedule.ceiling
    broken = small.copy()
    broken[: ITEMS // 2 + 1] = np.inf
    with pytest.raises(ScaleError, match="no bound"):
        schedule.bound_of(broken)


def node_key(user: int):
    return secagg.private_key(SEED, user, "seeded")


def sender(user: int) -> leader.Sender:
    public = secagg.public_bytes(node_key(user))
    identity = secagg_trust.identity_key(SEED, user, "seeded")
    signature = secagg_trust.sign(identity, secagg_trust.statement(RUN, user, public))
    return leader.Sender(user, public, signature)


def report(bounds: Bounds, helper: Helper, user: int, change: np.ndarray) -> rep.Report:
    return client.user_reports(
        bounds,
        lambda u: rep.context(RUN, ROUND, u, bounds),
        [user],
        [(np.array([user]), change)],
        10,
        1.0,
        seed=SEED,
        source="seeded",
        server_round=ROUND,
        own=node_key(user),
        helper_public=secagg.public_bytes(helper.key),
    )[0]


def test_reports_proven_against_the_rounds_bound_verify_and_others_are_refused(schedule):
    """The helper computes the round's bound from the table it is shown: reports proven
    against it aggregate, clipped to it; one proven against the ceiling (a client that
    ignores the schedule to push a longer change) is refused; without the table, the helper
    does not answer."""
    table = table_of(np.linspace(0.1, 0.5, ITEMS))
    helper = Helper(
        schedule,
        Schedule(SEED, USERS, 1.0, USERS, 1),
        secagg_trust.Roster(SEED, "seeded"),
        "seeded",
    )
    bounds = schedule.at(table)
    push = np.full((1, DIM), 3.0)  # norm 6: within the ceiling, beyond the round's bound
    reports = [report(bounds, helper, u, push) for u in range(USERS - 1)]
    reports.append(report(schedule.ceiling, helper, USERS - 1, push))
    pairs = [(r, sender(r.user)) for r in reports]
    total = leader.aggregate(
        bounds, RUN, ROUND, pairs, lambda *a: helper.answer(*a, table=table), helper.verify_key
    )
    assert total.accepted == (0, 1, 2) and USERS - 1 in total.refused
    assert np.linalg.norm(total.changes[:3], axis=1).max() <= bounds.bound
    assert np.linalg.norm(total.changes[:3], axis=1).min() > bounds.bound - 0.01
    with pytest.raises(leader.RoundVoid, match="table was not shown"):
        leader.aggregate(bounds, RUN, ROUND + 1, pairs, helper.answer, helper.verify_key)


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"secure-aggregation-bound-scale": 4.0}, "set secure-aggregation-bound"),
        ({"secure-aggregation-bound": 8.0, "secure-aggregation-bound-scale": 4.0}, "floor"),
        (
            {
                "secure-aggregation-bound": 8.0,
                "secure-aggregation-bound-scale": 4.0,
                "secure-aggregation-bound-floor": 9.0,
            },
            r"set it in \(0, 8\]",
        ),
        (
            {"secure-aggregation-bound": 8.0, "secure-aggregation-bound-floor": 1.0},
            "set secure-aggregation-bound-scale",
        ),
        ({"secure-aggregation-bound-scale": -1.0}, ">= 0"),
    ],
)
def test_the_scale_keys_are_checked_early(keys, match):
    with pytest.raises(ConfigError, match=match):
        RunConfig.from_mapping({"secure-aggregation": True, **keys})


def test_the_keys_give_the_rounds_bounds():
    config = RunConfig.from_mapping(
        {
            "secure-aggregation": True,
            "secure-aggregation-bound": 8.0,
            "secure-aggregation-bound-scale": 4.0,
            "secure-aggregation-bound-floor": 0.5,
        }
    )
    table = table_of(np.linspace(0.1, 0.5, ITEMS))
    assert round_bounds(config, table).bound == BoundSchedule(
        Bounds.of(ITEMS, DIM, 8.0), 4.0, 0.5
    ).bound_of(table)


@pytest.mark.parametrize(
    "name", ["secagg-scaled", "secagg-scaled-promote", "secagg-scaled-promote1"]
)
def test_the_audits_scaled_configurations_are_valid_runs(name):
    from fedrec_lab.audit.command import CONFIGS

    config = RunConfig.from_mapping({"protocol": "strict", **CONFIGS[name]})
    table = table_of(np.full(ITEMS, 0.25))
    assert round_bounds(config, table).bound == 5.0  # 20 x 0.25, within [1, 25]
    if "promote" in name:
        fraction = 0.01 if name.endswith("1") else 0.05
        assert CONFIGS[name]["malicious-fraction"] == fraction
