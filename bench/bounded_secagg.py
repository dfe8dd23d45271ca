"""The cost of bounded secure aggregation per user (``fedrec_flwr/privacy/bounded``).

For each case (a table of ``items`` rows of ``dim``, a user that changed ``rows`` of them,
the bounds ``bound`` and ``max-rows``), times an honest user's report (encoding, sharing
and the proof: the client), the leader's verification of it (the server) and the helper's
(opening the sealed seed, expanding its share, verifying), as medians of CPU seconds over
``--repeats`` users, and gives the report's bytes and the client's CPU beside plain secure
aggregation's (its dense masked vector, 8 bytes a value: each row, its count, users,
samples, loss; encoding it and masking it towards the round's neighbours), measured in the
same run; then the cost of a round of each case (its users a round times the per-user
figures: the bytes every client uploads, the CPU of the server and the helper). Also checks
every report verifies. Writes ``bench/results/privacy/bounded-secagg.md`` and ``.json``::

    python bench/bounded_secagg.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from fedrec_flwr.privacy import secagg, secagg_dropout, secagg_trust
from fedrec_flwr.privacy.bounded import client
from fedrec_flwr.privacy.bounded import report as rep
from fedrec_flwr.privacy.bounded.circuit import Bounds
from fedrec_flwr.privacy.bounded.helper import Helper, Schedule

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "privacy" / "bounded-secagg.md"
SEED, RUN, ROUND = 0, 1, 1


@dataclass(frozen=True)
class Case:
    name: str
    items: int
    dim: int
    rows: int
    bound: float
    max_rows: int
    users: int  # users a round (the preset's fraction-train 1.0: every user)


CASES = (
    Case("ML-100K (1682 items), d = 32", 1682, 32, 100, 25.0, 200, 943),
    Case("synthetic 100k users (2000 items), d = 32", 2000, 32, 250, 25.0, 500, 100_000),
)


def cpu(call):
    """(result, CPU seconds of the process) of ``call()``."""
    start = time.process_time()
    out = call()
    return out, time.process_time() - start


def one_user(bounds: Bounds, helper: Helper, user: int, rows: int) -> dict[str, float]:
    """CPU seconds of one honest user's report at the client, the leader and the helper."""
    rng = np.random.default_rng(user)
    items = np.sort(rng.choice(bounds.num_items, rows, replace=False))
    changes = rng.normal(size=(rows, bounds.row_dim))
    ctx = rep.context(RUN, ROUND, user, bounds)
    own = secagg.private_key(SEED, user, "seeded")
    reports, client_s = cpu(
        lambda: client.user_reports(
            bounds,
            lambda u: ctx,
            [user],
            [(items, changes)],
            10,
            1.0,
            seed=SEED,
            source="seeded",
            server_round=ROUND,
            own=own,
            helper_public=secagg.public_bytes(helper.key),
        )
    )
    report = reports[0]
    share, leader_s = cpu(lambda: rep.leader_share(bounds, ctx, report, helper.verify_key))

    def helper_side():
        sigma = rep.open_sealed(report.sealed, helper.key, secagg.public_bytes(own), ctx)
        verifier, _ = rep.helper_share(
            bounds, ctx, sigma, share, report.helper_parts, helper.verify_key
        )
        return verifier

    verifier, helper_s = cpu(helper_side)
    if not rep.accepts(bounds, share.verifier, verifier):
        raise AssertionError(f"an honest report of user {user} does not verify")
    return {"client": client_s, "leader": leader_s, "helper": helper_s, "bytes": report.num_bytes}


def plain_client(case: Case, user: int) -> float:
    """CPU seconds of one user's plain secure-aggregation upload: its dense vector encoded
    and masked towards the round's neighbours (SecAgg+ degree for ``case.users`` nodes)."""
    rng = np.random.default_rng(user)
    layout = secagg.Layout.of(case.items, case.dim, {})
    items = np.sort(rng.choice(case.items, case.rows, replace=False))
    rows = rng.normal(size=(case.rows, case.dim))
    k = secagg_dropout.degree(case.users)
    near = {p: secagg.public_bytes(secagg.private_key(SEED, p, "seeded")) for p in range(1, k + 1)}
    own = secagg.private_key(SEED, 0, "seeded")

    def upload():
        vector = secagg.encode(
            layout,
            items,
            rows,
            {},
            num_users=1,
            num_samples=10,
            loss_sum=1.0,
            total_users=case.users,
        )
        return secagg_dropout.mask_round(
            vector, own, 0, near, b"digest", secagg_dropout.threshold(k)
        )

    return cpu(upload)[1]


def measure(case: Case, repeats: int) -> dict[str, float]:
    bounds = Bounds.of(case.items, case.dim, case.bound, case.max_rows)
    schedule = Schedule(SEED, repeats, 1.0, repeats, 1)
    helper = Helper(bounds, schedule, secagg_trust.Roster(SEED, "seeded"), "seeded")
    runs = [one_user(bounds, helper, user, case.rows) for user in range(repeats)]
    out = {k: statistics.median(r[k] for r in runs) for k in ("client", "leader", "helper")}
    out["plain_client"] = statistics.median(plain_client(case, u) for u in range(repeats))
    out["bytes"] = runs[0]["bytes"]
    out["dense"] = 8 * (case.items * (case.dim + 1) + 3)
    out["frac_bits"] = bounds.frac_bits
    out["proof"] = 8 * rep.proof_shape(bounds).proof_len
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    with threadpool_limits(1):  # one BLAS thread: idle threads' spinning is not the work's
        results = {case.name: {**vars(case), **measure(case, args.repeats)} for case in CASES}
    lines = [
        f"Per user, medians over {args.repeats} users (CPU seconds of the process, "
        "this machine's NumPy on one BLAS thread; bytes as they travel; ratios: bounded "
        "over plain secure aggregation, measured in the same run):",
        "",
        "| case | rows changed | bound B | max-rows | fixed point | report MB | of which "
        "proof MB | plain secagg MB | bytes ratio | client CPU-s | plain client CPU-s | "
        "client ratio | leader CPU-s | helper CPU-s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in CASES:
        m = results[case.name]
        lines.append(
            f"| {case.name} | {case.rows} | {case.bound:g} | {case.max_rows} | "
            f"2^-{m['frac_bits']} | {m['bytes'] / 1e6:.3f} | {m['proof'] / 1e6:.3f} | "
            f"{m['dense'] / 1e6:.3f} | {m['bytes'] / m['dense']:.2f} | {m['client']:.3f} | "
            f"{m['plain_client']:.3f} | {m['client'] / m['plain_client']:.1f} | "
            f"{m['leader']:.3f} | {m['helper']:.3f} |"
        )
    lines += [
        "",
        "A round (every user of the case trains: its users a round times the per-user "
        "medians above; each client's CPU is its own device's):",
        "",
        "| case | users a round | upload GB a round | plain secagg GB | client CPU-s each "
        "| server CPU-s | helper CPU-s |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in CASES:
        m = results[case.name]
        lines.append(
            f"| {case.name} | {case.users:,} | {case.users * m['bytes'] / 1e9:.2f} | "
            f"{case.users * m['dense'] / 1e9:.2f} | {m['client']:.3f} | "
            f"{case.users * m['leader']:.0f} | {case.users * m['helper']:.0f} |"
        )
    lines += ["", "```bash", "python bench/bounded_secagg.py " + " ".join(sys.argv[1:]), "```"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
