"""Bounded secure aggregation (fedrec_flwr.privacy.bounded): each user's report proves its
change of the table within the bounds; a client that does not follow the protocol is
refused by verification, dropped, and the others aggregate."""

from __future__ import annotations

import dataclasses
import math

import bounded_cheats as cheats
import numpy as np
import pytest

from fedrec_flwr.privacy import secagg, secagg_trust
from fedrec_flwr.privacy.bounded import circuit as circ
from fedrec_flwr.privacy.bounded import client, flp, leader
from fedrec_flwr.privacy.bounded import encoding as enc
from fedrec_flwr.privacy.bounded import field as gf
from fedrec_flwr.privacy.bounded import report as rep
from fedrec_flwr.privacy.bounded.helper import Helper, Schedule

SEED, RUN, ROUND = 3, 77, 5
ITEMS, DIM, BOUND, MAX_ROWS = 40, 4, 2.0, 12
USERS = 6


@pytest.fixture(scope="module")
def bounds() -> circ.Bounds:
    return circ.Bounds.of(ITEMS, DIM, BOUND, MAX_ROWS)


def node_key(partition: int):
    return secagg.private_key(SEED, partition, "seeded")


def sender(partition: int) -> leader.Sender:
    public = secagg.public_bytes(node_key(partition))
    identity = secagg_trust.identity_key(SEED, partition, "seeded")
    signature = secagg_trust.sign(identity, secagg_trust.statement(RUN, partition, public))
    return leader.Sender(partition, public, signature)


def make_helper(bounds, min_reports=2) -> Helper:
    schedule = Schedule(SEED, USERS, 1.0, USERS, min_reports)
    return Helper(bounds, schedule, secagg_trust.Roster(SEED, "seeded"), "seeded")


def ctx_of(bounds, user):
    return rep.context(RUN, ROUND, user, bounds)


def honest(bounds, helper, user, items, changes, samples=10, loss=1.5) -> rep.Report:
    return client.user_reports(
        bounds,
        lambda u: ctx_of(bounds, u),
        [user],
        [(np.asarray(items), np.asarray(changes, dtype=np.float64))],
        samples,
        loss,
        seed=SEED,
        source="seeded",
        server_round=ROUND,
        own=node_key(user),
        helper_public=secagg.public_bytes(helper.key),
    )[0]


def forged(bounds, helper, user, values, cheat=False) -> rep.Report:
    """A report of an arbitrary input (field elements, wrap-around bits included), shared
    and proven as the protocol does; ``cheat``: a proof that lies (:func:`bounded_cheats.
    forged`)."""
    helper_public = secagg.public_bytes(helper.key)
    ctx = ctx_of(bounds, user)
    return cheats.forged(bounds, ctx, user, values, node_key(user), helper_public, cheat)


def run_round(bounds, helper, reports):
    return leader.aggregate(
        bounds,
        RUN,
        ROUND,
        [(r, sender(r.user)) for r in reports],
        helper.answer,
        helper.verify_key,
    )


def change(rng, rows, norm):
    out = rng.normal(size=(rows, DIM))
    return out / np.linalg.norm(out, axis=1, keepdims=True) * np.reshape(norm, (-1, 1))


# ------------------------------------------------------------------ the field
def test_field_arithmetic_matches_python_integers():
    rng = np.random.default_rng(0)
    a = rng.integers(0, gf.P, size=5000, dtype=np.uint64)
    b = rng.integers(0, gf.P, size=5000, dtype=np.uint64)
    a[:3], b[:3] = [0, gf.P - 1, gf.P - 2], [gf.P - 1, gf.P - 1, 1]
    for got, op in ((gf.mul(a, b), lambda x, y: x * y), (gf.add(a, b), lambda x, y: x + y)):
        assert [int(v) for v in got] == [
            op(int(x), int(y)) % gf.P for x, y in zip(a, b, strict=True)
        ]
    assert [int(v) for v in gf.sub(a, b)] == [
        (int(x) - int(y)) % gf.P for x, y in zip(a, b, strict=True)
    ]
    assert (gf.mul(gf.inv(a[1:50]), a[1:50]) == 1).all()
    m = rng.integers(0, gf.P, size=(3, 2500), dtype=np.uint64)
    v = rng.integers(0, gf.P, size=(2500, 2), dtype=np.uint64)
    want = [
        [sum(int(m[i, k]) * int(v[k, j]) for k in range(2500)) % gf.P for j in range(2)]
        for i in range(3)
    ]
    assert gf.matmul(m, v).tolist() == want
    assert int(gf.total(a)) == sum(map(int, a)) % gf.P


def test_flp_accepts_a_true_statement_and_refuses_a_false_one():
    rng = np.random.default_rng(1)
    left = rng.integers(0, gf.P, size=1000, dtype=np.uint64)
    right = rng.integers(0, gf.P, size=1000, dtype=np.uint64)
    linear = gf.neg(gf.total(gf.mul(left, right)))
    shape = flp.ProofShape.of(1000, 8)
    proof = flp.prove(shape, left, right, rng.integers(0, gf.P, 2 * shape.chunk, dtype=np.uint64))
    point = gf.elements([123456789])
    assert flp.decide(shape, flp.query(shape, left, right, linear, proof, point))
    assert not flp.decide(shape, flp.query(shape, left, right, gf.add(linear, 1), proof, point))
    lied = proof.copy()
    lied[2 * shape.chunk + 3] = gf.add(lied[2 * shape.chunk + 3], 1)  # a gadget output
    assert not flp.decide(shape, flp.query(shape, left, right, gf.sub(linear, 1), lied, point))
    assert flp.soundness_error(shape) < 2.0**-55


# --------------------------------------------------------------- the bounds
def test_the_fixed_point_keeps_every_square_exact(bounds):
    assert bounds.exact()
    assert (circ.WRAP_FACTOR * bounds.beta) ** 2 + bounds.square_bound < gf.P
    assert bounds.beta >= circ.WRAP_ALPHA * math.sqrt(bounds.max_rows * bounds.square_bound)
    with pytest.raises(circ.BoundsError, match="secure-aggregation-max-rows"):
        circ.Bounds.of(10_000_000, 32, 1e6)


def test_an_honest_round_sums_the_clipped_changes(bounds):
    helper = make_helper(bounds)
    rng = np.random.default_rng(2)
    reports, expected = [], np.zeros((ITEMS, DIM))
    for user in range(USERS):
        items = np.sort(rng.choice(ITEMS, 5, replace=False))
        changes = change(rng, 5, [0.5, 1.0, 1.9, 3.0, 10.0])  # the last two get clipped
        reports.append(honest(bounds, helper, user, items, changes))
        room = BOUND - math.sqrt(DIM) / 2.0**bounds.frac_bits
        norms = np.linalg.norm(changes, axis=1, keepdims=True)
        expected[items] += changes * np.minimum(1.0, room / norms)
    total = run_round(bounds, helper, reports)
    assert total.accepted == tuple(range(USERS)) and not total.refused
    assert total.users == USERS and total.counts.sum() == 5 * USERS
    assert total.samples == 10 * USERS and total.loss == pytest.approx(1.5 * USERS, abs=1e-4)
    assert np.abs(total.changes - expected).max() < USERS * 2.0**-bounds.frac_bits


def test_a_user_beyond_max_rows_keeps_its_longest_changes(bounds):
    rng = np.random.default_rng(3)
    items = np.arange(MAX_ROWS + 3)
    changes = change(rng, len(items), np.linspace(0.1, 1.5, len(items)))
    kept, _ = enc.clipped(bounds, items, changes, rng)
    assert kept.tolist() == items[3:].tolist()


# ------------------------------------------------------ clients that cheat
def _report_with(bounds, helper, user, edit, cheat=False):
    """An honest input of ``user`` edited by ``edit(values)`` (field elements, wrap-around
    bits recomputed for the forged report's randomness when ``edit`` keeps them in range)."""
    rng = np.random.default_rng(user)
    items = np.sort(rng.choice(ITEMS, 4, replace=False))
    m = enc.measure(bounds, items, change(rng, 4, 1.0), 10, 1.5, rng)
    values = cheats.with_wrap_bits(bounds, ctx_of(bounds, user), edit(bounds, m.values.copy()))
    return forged(bounds, helper, user, values, cheat)


def _long_row(bounds, values):
    d = bounds.part(values, "d").reshape(ITEMS, DIM)
    top = int(np.flatnonzero(bounds.part(values, "c"))[0])
    row = np.full(DIM, int(1.5 * BOUND * 2**bounds.frac_bits / math.sqrt(DIM)))
    d[top] = gf.from_signed(row)
    values[: ITEMS * DIM] = d.ravel()
    return values


def _long_row_with_wrapped_slack(bounds, values):
    """A row beyond the bound whose negative slack the witnesses make up modulo P: squares
    near P, caught only by the wrap-around checks."""
    d, counts = cheats.signed_rows(bounds, values)
    top = int(np.flatnonzero(counts)[0])
    long = np.full(DIM, int(1.5 * BOUND * 2**bounds.frac_bits / math.sqrt(DIM)))
    while True:  # a row whose wrapped slack leaves a greedy remainder that fits the bits
        slack = (bounds.square_bound - int((long * long).sum())) % gf.P
        roots, rest = [], slack
        for _ in range(4):
            roots.append(math.isqrt(rest))
            rest -= roots[-1] ** 2
        if rest < 1 << bounds.rem_bits:
            break
        long[0] += 1
    d[top] = long
    values[: ITEMS * DIM] = gf.from_signed(d.ravel())
    lo, _ = bounds.offsets["w"]
    values[lo + 4 * top : lo + 4 * top + 4] = gf.elements(roots)
    lo, _ = bounds.offsets["rem"]
    values[lo + top * bounds.rem_bits : lo + (top + 1) * bounds.rem_bits] = enc.bits_of(
        rest, bounds.rem_bits
    )
    return values


def _untouched_row_moved(bounds, values):
    untouched = int(np.flatnonzero(bounds.part(values, "c") == 0)[0])
    values[untouched * DIM] = 5  # a row no count covers
    return values


def _wrapped_row(bounds, values):
    """A row whose squares sum, modulo P, to exactly what an honest row's do, with
    coordinates near P/2: it passes every square check and only the wrap-around checks
    catch it."""
    d = bounds.part(values, "d").reshape(ITEMS, DIM)
    top = int(np.flatnonzero(bounds.part(values, "c"))[0])
    target = int(gf.total(gf.mul(d[top], d[top])))
    rng = np.random.default_rng(9)
    while True:  # a^2 + b^2 = target (mod P), a and b large; P = 3 mod 4: sqrt = x^((P+1)/4)
        a = int(rng.integers(gf.P // 4, gf.P // 2))
        rest = (target - a * a) % gf.P
        b = pow(rest, (gf.P + 1) // 4, gf.P)
        if b * b % gf.P == rest:
            break
    d[top] = gf.elements([a, b] + [0] * (DIM - 2))
    values[: ITEMS * DIM] = d.ravel()
    return values


CHEATS = {
    "row change beyond the bound": _long_row,
    "row change beyond the bound, slack wrapped": _long_row_with_wrapped_slack,
    "more rows than max-rows": cheats.too_many_rows,
    "a count of 2": cheats.count_of_two,
    "a user count of 2": cheats.two_users,
    "a row changed with count 0": _untouched_row_moved,
    "a wrapped-around row": _wrapped_row,
}


@pytest.mark.parametrize("cheat", [False, True], ids=["honest proof", "lying proof"])
@pytest.mark.parametrize("name", list(CHEATS))
def test_a_cheating_client_is_refused_and_the_others_aggregate(bounds, name, cheat):
    helper = make_helper(bounds)
    rng = np.random.default_rng(4)
    reports, expected = [], np.zeros((ITEMS, DIM))
    for user in range(1, USERS):
        items = np.sort(rng.choice(ITEMS, 3, replace=False))
        changes = change(rng, 3, 1.0)
        reports.append(honest(bounds, helper, user, items, changes))
        expected[items] += changes
    reports.append(_report_with(bounds, helper, 0, CHEATS[name], cheat))
    total = run_round(bounds, helper, reports)
    assert total.accepted == tuple(range(1, USERS)), name
    assert set(total.refused) == {0}
    assert total.users == USERS - 1
    assert np.abs(total.changes - expected).max() < USERS * 2.0**-bounds.frac_bits


def test_the_forged_reports_verify_when_nothing_is_edited(bounds):
    """The forgery of the tests above is sound: unedited, its report is accepted."""
    helper = make_helper(bounds)
    reports = [_report_with(bounds, helper, 0, lambda b, v: v)]
    reports.append(honest(bounds, helper, 1, [2, 3], change(np.random.default_rng(5), 2, 1.0)))
    assert run_round(bounds, helper, reports).accepted == (0, 1)


def test_a_malformed_report_is_refused(bounds):
    helper = make_helper(bounds)
    rng = np.random.default_rng(6)
    good = [honest(bounds, helper, u, [u], change(rng, 1, 1.0)) for u in range(1, 4)]
    bad = honest(bounds, helper, 0, [0], change(rng, 1, 1.0))
    random_proof = rep.Report(
        0,
        bad.share,
        rng.integers(0, gf.P, size=len(bad.proof), dtype=np.uint64),
        bad.blind,
        bad.helper_parts,
        bad.sealed,
    )
    wrong_parts = rep.Report(0, bad.share, bad.proof, bad.blind, (bytes(32), bytes(32)), bad.sealed)
    short = rep.Report(0, bad.share[:-1], bad.proof, bad.blind, bad.helper_parts, bad.sealed)
    other_seal = rep.Report(0, bad.share, bad.proof, bad.blind, bad.helper_parts, good[0].sealed)
    for report in (random_proof, wrong_parts, short, other_seal):
        total = run_round(bounds, make_helper(bounds), [*good, report])
        assert total.accepted == (1, 2, 3) and 0 in total.refused


def test_the_helper_reveals_no_sum_of_too_few_nor_twice(bounds):
    helper = make_helper(bounds, min_reports=3)
    rng = np.random.default_rng(7)
    reports = [honest(bounds, helper, u, [u], change(rng, 1, 1.0)) for u in range(2)]
    with pytest.raises(leader.RoundVoid, match="fewer than the 3"):
        run_round(bounds, helper, reports)
    helper = make_helper(bounds, min_reports=1)
    run_round(bounds, helper, reports)
    with pytest.raises(leader.RoundVoid, match="answered already"):
        run_round(bounds, helper, reports)


def test_a_report_replayed_in_another_round_is_refused(bounds):
    """The server cannot count an old report again: its seed is sealed to its round."""
    helper = make_helper(bounds, min_reports=1)
    rng = np.random.default_rng(11)
    reports = [honest(bounds, helper, u, [u], change(rng, 1, 1.0)) for u in range(3)]
    pairs = [(r, sender(r.user)) for r in reports]
    with pytest.raises(leader.RoundVoid, match="0 reports verified"):
        leader.aggregate(bounds, RUN, ROUND + 1, pairs, helper.answer, helper.verify_key)


def test_a_share_tampered_by_the_server_is_refused(bounds):
    helper = make_helper(bounds, min_reports=1)
    rng = np.random.default_rng(12)
    reports = [honest(bounds, helper, u, [u], change(rng, 1, 1.0)) for u in range(3)]
    share = reports[0].share.copy()
    share[0] = gf.add(share[0], 1 << 20).item()  # row 0's first coordinate moved
    tampered = dataclasses.replace(reports[0], share=share)
    total = run_round(bounds, helper, [tampered, *reports[1:]])
    assert total.accepted == (1, 2) and 0 in total.refused


def test_a_second_report_of_a_user_is_refused_and_the_round_goes_on(bounds):
    helper = make_helper(bounds, min_reports=1)
    rng = np.random.default_rng(13)
    reports = [honest(bounds, helper, u, [u], change(rng, 1, 1.0)) for u in range(3)]
    again = honest(bounds, helper, 0, [5], change(rng, 1, 1.0))
    total = run_round(bounds, helper, [*reports, again])
    assert total.accepted == (0, 1, 2) and total.users == 3
    assert "second report" in total.refused[0]
    assert total.counts[5] == 0 and total.counts[:3].tolist() == [1, 1, 1]


def test_the_helper_refuses_a_report_of_a_forged_node_key(bounds):
    helper = make_helper(bounds, min_reports=1)
    rng = np.random.default_rng(8)
    reports = [honest(bounds, helper, u, [u], change(rng, 1, 1.0)) for u in range(3)]
    forged_sender = sender(0)
    forged_sender = leader.Sender(0, forged_sender.key, np.zeros_like(forged_sender.signature))
    pairs = [(reports[0], forged_sender)] + [(r, sender(r.user)) for r in reports[1:]]
    total = leader.aggregate(bounds, RUN, ROUND, pairs, helper.answer, helper.verify_key)
    assert total.accepted == (1, 2) and "not signed" in total.refused[0]


def test_reports_travel_as_arrays(bounds):
    helper = make_helper(bounds)
    rng = np.random.default_rng(10)
    reports = [honest(bounds, helper, u, [u, u + 1], change(rng, 2, 1.0)) for u in range(3)]
    arrays = client.pack(reports)
    assert tuple(arrays) == client.ARRAYS
    back = client.unpack(arrays)
    assert [r.user for r in back] == [0, 1, 2]
    for a, b in zip(reports, back, strict=True):
        assert (a.share == b.share).all() and (a.proof == b.proof).all()
        assert (a.blind, a.helper_parts, a.sealed) == (b.blind, b.helper_parts, b.sealed)


def test_nodes_check_the_helpers_key_against_its_roster_entry(bounds, tmp_path):
    helper = make_helper(bounds)
    told = helper.public(RUN)
    roster = secagg_trust.Roster(SEED, "seeded")
    identity = roster.key_of(secagg_trust.HELPER_ID, None)
    statement = secagg_trust.statement(RUN, secagg_trust.HELPER_ID, told["helper-key"])
    assert secagg_trust.verifies(identity, statement, told["helper-signature"])
    other = secagg_trust.statement(RUN + 1, secagg_trust.HELPER_ID, told["helper-key"])
    assert not secagg_trust.verifies(identity, other, told["helper-signature"])
    (tmp_path / "helper.pub").write_bytes(bytes(told["helper-identity"]))
    from_file = secagg_trust.Roster(SEED, "random", folder=str(tmp_path))
    assert secagg_trust.verifies(
        from_file.key_of(secagg_trust.HELPER_ID, None), statement, told["helper-signature"]
    )
