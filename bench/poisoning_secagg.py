"""Poisoning under bounded secure aggregation: ``promote`` clients against
``secure-aggregation-bound``, PFedRec and FedMF on ML-100K under ``strict``.

Faithful mode without Flower, as ``bench/poisoning.py`` runs it (one node runtime trains a
round's users as one batch; each user's upload is captured on its own). Each user's upload
becomes what its bounded report carries (:func:`fedrec_flwr.privacy.bounded.encoding.clipped`:
its row changes against the table as sent, clipped to ``B`` per row and ``max-rows`` rows,
rounded stochastically with the draws the node's report uses), and the server applies the
exact integer sum of those, as :mod:`fedrec_flwr.server.bounded_rounds` does with the
verified reports' sum. A malicious client here follows the protocol (its poisoned change
clipped like any other): one that does not is refused by the proof, so this is the most it
can do. Every round, ``--verify`` users (malicious ones first) also go through the whole
protocol (reports, the server's and the helper's verification, the decoded sum), and their
decoded sum must equal the same users' share of the fast sum bit for bit (else the command
stops). The proofs of every user are not run: 943 users a round at about 0.5 CPU-s each
(``bench/results/privacy/bounded-secagg.md``) would take hours a run.

Runs per method and seed: clean (no bound), each malicious share under the bound, then
clean under the bound (``--no-bounded-clean`` leaves it out). Writes ``--out`` (Markdown)
and ``<out>.json`` after each run; a run already in the JSON is kept (a stopped command
resumes)::

    FEDREC_DATA_DIR=../shared/datasets python bench/poisoning_secagg.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
from poisoning import (  # bench/ is the script's folder
    evaluates,
    evaluation,
    train_round,
    write,
)
from poisoning_secagg_report import CLEAN, METHODS, table

from fedrec_flwr.aggregation import RowUpload
from fedrec_flwr.config import RunConfig
from fedrec_flwr.data.prepared import prepare
from fedrec_flwr.node import malicious
from fedrec_flwr.node.malicious import MaliciousKeys
from fedrec_flwr.node.runtime import NodeRuntime
from fedrec_flwr.privacy import secagg, secagg_trust, uploads
from fedrec_flwr.privacy.bounded import client, leader
from fedrec_flwr.privacy.bounded import report as rep
from fedrec_flwr.privacy.bounded.circuit import Bounds
from fedrec_flwr.privacy.bounded.encoding import clipped_sum
from fedrec_flwr.privacy.bounded.helper import Helper, Schedule
from fedrec_flwr.privacy.bounded.scaled import BoundSchedule
from fedrec_flwr.server.model import ServerModel
from fedrec_lab.presets import resolve

ROOT = Path(__file__).resolve().parent.parent
PRESETS = {method: ROOT / "conf" / f"{method}-ml100k-strict.toml" for method in METHODS}
OUT = ROOT / "bench" / "results" / "poisoning-secagg.md"
RUN_ID = 1


class PerUser:
    """Observer keeping each user's upload of the round (user, items, tuned rows)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, np.ndarray, np.ndarray]] = []

    def __call__(self, user, server_round, items, rows, sent) -> None:
        self.rows.append((int(user), items.copy(), np.asarray(rows, np.float32).copy()))


def fast_sum(bounds: Bounds, table: np.ndarray, per_user, seed: int, server_round: int):
    """(the integer sum of the users' clipped fixed-point changes, their row counts)."""
    users = [user for user, _, _ in per_user]
    blocks = [(items, rows.astype(np.float64) - table[items]) for _, items, rows in per_user]
    return clipped_sum(bounds, users, blocks, seed, server_round)


class Protocol:
    """The whole protocol for a few users of a round (each its own node)."""

    def __init__(self, rounds: BoundSchedule, seed: int, num_users: int) -> None:
        self.seed = seed
        schedule = Schedule(seed, num_users, 1.0, num_users, 1)
        self.helper = Helper(rounds, schedule, secagg_trust.Roster(seed, "seeded"), "seeded")

    def decoded(self, bounds: Bounds, table, per_user, server_round: int) -> np.ndarray:
        """The users' decoded sum of changes, in fixed point (int64), proven against the
        round's ``bounds`` (the helper computes its own from ``table``)."""
        self.bounds, reports = bounds, []
        for user, items, rows in per_user:
            key = secagg.private_key(self.seed, user, "seeded")
            public = secagg.public_bytes(key)
            identity = secagg_trust.identity_key(self.seed, user, "seeded")
            told = secagg_trust.statement(RUN_ID, user, public)
            sender = leader.Sender(user, public, secagg_trust.sign(identity, told))
            report = client.user_reports(
                self.bounds,
                lambda u: rep.context(RUN_ID, server_round, u, self.bounds),
                [user],
                [(items, rows.astype(np.float64) - table[items])],
                0,
                0.0,
                seed=self.seed,
                source="seeded",
                server_round=server_round,
                own=key,
                helper_public=secagg.public_bytes(self.helper.key),
            )[0]
            reports.append((report, sender))
        total = leader.aggregate(
            self.bounds,
            RUN_ID,
            server_round,
            reports,
            partial(self.helper.answer, table=table),
            self.helper.verify_key,
        )
        if total.refused or len(total.accepted) != len(per_user):
            raise SystemExit(f"round {server_round}: honest reports refused: {total.refused}")
        return np.rint(total.changes * 2.0**self.bounds.frac_bits).astype(np.int64)


def run(
    config: RunConfig,
    bound: float,
    max_rows: int,
    verify: int,
    eval_every: int,
    scaled: tuple[float, float] = (0.0, 0.0),
) -> dict:
    """One faithful-mode run; each evaluated round's test HR@10 and ER@10 (of one target),
    and each round's bound (``scaled``: the bound's scale and floor, 0: a fixed bound)."""
    prepared = prepare(config)
    runtime = NodeRuntime(config, prepared, 0, 1)
    runtime.protocol.target_items = malicious.target_items(prepared, config.training.seed, 1)
    model = ServerModel.initial(config, runtime.method, prepared.num_items)
    dim = model.table.shape[1]
    ceiling = Bounds.of(prepared.num_items, dim, bound, max_rows) if bound else None
    rounds = BoundSchedule(ceiling, *scaled) if ceiling else None
    protocol = Protocol(rounds, config.training.seed, prepared.num_users) if rounds else None
    bounds_used: list[float] = []
    bad = set(
        malicious.malicious_users(
            config.training.seed, prepared.num_users, config.group(MaliciousKeys).malicious_fraction
        ).tolist()
    )
    state, observer, history, checked = runtime.initial_state(), PerUser(), [], 0
    uploads.OBSERVERS.append(observer)
    try:
        for server_round in range(1, config.training.num_server_rounds + 1):
            observer.rows.clear()
            state, table = train_round(runtime, model, state, server_round)
            if rounds is None:
                one = np.ones
                model.apply(
                    [RowUpload(i, r, one(len(i), np.int64), 1) for _, i, r in observer.rows]
                )
            else:
                bounds = rounds.at(table)
                bounds_used.append(bounds.bound)
                total, counts = fast_sum(
                    bounds, table, observer.rows, config.training.seed, server_round
                )
                sample = sorted(observer.rows, key=lambda u: (u[0] not in bad, u[0]))[:verify]
                if sample:
                    fast, _ = fast_sum(bounds, table, sample, config.training.seed, server_round)
                    decoded = protocol.decoded(bounds, table, sample, server_round)
                    if not np.array_equal(decoded, fast):
                        raise SystemExit(f"round {server_round}: the protocol's sum differs")
                    checked += len(sample)
                touched = np.flatnonzero(counts)
                changes = total[touched].astype(np.float64) * 2.0**-bounds.frac_bits
                sums = changes + counts[touched, None] * table[touched]
                model.apply([RowUpload(touched, sums, counts[touched], len(observer.rows))])
            if evaluates(config, server_round, eval_every):
                history.append(evaluation(runtime, state, model, server_round))
    finally:
        uploads.OBSERVERS.remove(observer)
    return {"history": history, "verified-users": checked, "bounds": bounds_used}


#: The settings every run of one result file shares (a JSON of other settings is refused).
SETTINGS = (
    "rounds",
    "eval_every",
    "scale",
    "bound",
    "max_rows",
    "verify",
    "bound_scale",
    "bound_floor",
)
#: Settings added later, as files written without them hold them.
SETTING_DEFAULTS = {"bound_scale": 0.0, "bound_floor": 0.0}


def bound_label(bound: float, max_rows: int, scaled: tuple[float, float]) -> str:
    """The bound as run names give it."""
    label = f"secure-aggregation-bound {bound:g}"
    if scaled[0] > 0:
        label += f" (scale {scaled[0]:g}, floor {scaled[1]:g})"
    return label + (f", max-rows {max_rows}" if max_rows else "")


def runs_of(
    fractions: list[float],
    scale: float,
    bound: float,
    max_rows: int,
    unbounded: list[float],
    scaled: tuple[float, float] = (0.0, 0.0),
) -> list[tuple]:
    """(name, overrides, bound) of each run of a method and seed, in the order they run:
    the clean run, each malicious share under the bound (in the order given), the clean run
    under the bound, then each share of ``unbounded`` without a bound (the attack with no
    defence)."""
    attack = {"malicious-attack": "promote", "malicious-scale": scale}
    label = bound_label(bound, max_rows, scaled)
    out = [(CLEAN, {}, 0.0)]
    for fraction in fractions:
        name = f"{100 * fraction:g} % promote, {label}"
        out.append((name, {**attack, "malicious-fraction": fraction}, bound))
    out.append((f"clean, {label}", {}, bound))
    for fraction in unbounded:
        name = f"{100 * fraction:g} % promote, no bound"
        out.append((name, {**attack, "malicious-fraction": fraction}, 0.0))
    return out


#: The clean run of ``bench/poisoning.py`` (PFedRec, the same computation as ours).
POISONING_CLEAN = ("pfedrec", "clean (no malicious user)")


def clean_runs(path: Path, settings: dict) -> dict[tuple[str, int], dict]:
    """Each (method, seed)'s clean run of a ``bench/poisoning.py`` JSON (PFedRec's) or of
    another JSON of ours (``clean, no bound``), as a run of ours: the same computation (no
    attack, no bound), so it need not run again. Its settings must hold ours (rounds,
    evaluation rounds) and ER@10 of one target item."""
    record = json.loads(path.read_text())
    theirs = record["settings"]
    ours = "bound" in theirs  # a JSON of this command
    same = (theirs["rounds"], theirs["eval_every"], 1 if ours else theirs["targets"])
    if same != (settings["rounds"], settings["eval_every"], 1):
        raise SystemExit(f"{path} holds runs of {theirs}, not of {settings} and 1 target")
    name = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
    wanted = CLEAN if ours else POISONING_CLEAN[1]
    return {
        (r.get("method", POISONING_CLEAN[0]), r["seed"]): {
            "history": r["history"],
            "verified-users": 0,
            "seconds": r["seconds"],
            "from": name,
        }
        for r in record["runs"]
        if r["name"] == wanted and r.get("from") is None
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.01, 0.05])
    parser.add_argument("--scale", type=float, default=100.0, help="malicious-scale of promote")
    parser.add_argument("--bound", type=float, default=25.0, help="secure-aggregation-bound")
    parser.add_argument("--max-rows", type=int, default=0, help="secure-aggregation-max-rows")
    parser.add_argument(
        "--bound-scale",
        type=float,
        default=0.0,
        help="secure-aggregation-bound-scale: each round's bound this times the table's median "
        "row norm (0: the bound every round)",
    )
    parser.add_argument(
        "--bound-floor", type=float, default=0.0, help="secure-aggregation-bound-floor"
    )
    parser.add_argument("--verify", type=int, default=2, help="users a round through the protocol")
    parser.add_argument(
        "--bounded-clean",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the clean run under the bound (the bound's cost without an attack)",
    )
    parser.add_argument(
        "--clean-from",
        type=Path,
        help="a bench/poisoning.py JSON whose clean runs stand for PFedRec's clean runs "
        "without a bound (the same computation), or a JSON of this command whose clean runs "
        "without a bound stand for ours, of the methods and seeds it holds",
    )
    parser.add_argument(
        "--unbounded",
        type=float,
        nargs="*",
        default=[],
        help="malicious shares also run without a bound (the attack with no defence)",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--table", action="store_true", help="only write --out from its JSON's runs (no run)"
    )
    args = parser.parse_args()
    settings = {key: getattr(args, key) for key in SETTINGS}
    scaled = (args.bound_scale, args.bound_floor)
    results = args.out.with_suffix(".json")
    record = {"settings": settings, "commands": [], "runs": []}
    if results.exists():
        record = json.loads(results.read_text())
        if {**SETTING_DEFAULTS, **record["settings"]} != settings:
            raise SystemExit(f"{results} holds runs of {record['settings']}, not {settings}")
    runs = runs_of(args.fractions, args.scale, args.bound, args.max_rows, args.unbounded, scaled)
    bounded = [n for n, overrides, bound in runs if bound]
    shares = set(bounded[:-1])  # the malicious shares under the bound
    names = [runs[0][0], bounded[-1], *sorted(shares)]
    names += sorted(({r["name"] for r in record["runs"]} | {n for n, _, _ in runs}) - set(names))
    if args.table:
        write(args.out, table(record, names, shares))
        print(f"wrote {args.out}")
        return 0
    command = " ".join(["python bench/poisoning_secagg.py", *sys.argv[1:]])
    if command not in record["commands"]:
        record["commands"].append(command)
    done = {(r["method"], r["name"], r["seed"]) for r in record["runs"]}
    reused = clean_runs(args.clean_from.resolve(), settings) if args.clean_from else {}
    for seed in args.seeds:
        for method in args.methods:
            base = {**resolve(PRESETS[method]), "num-server-rounds": args.rounds, "seed": seed}
            for name, overrides, bound in runs:
                if (method, name, seed) in done or (
                    bound and not overrides and not args.bounded_clean
                ):
                    continue
                clean = not overrides and not bound
                if clean and (method, seed) in reused:
                    found = reused[(method, seed)]
                    run_ = {**found, "method": method, "name": name, "seed": seed}
                    record["runs"].append(run_)
                    write(results, json.dumps(record, indent=1) + "\n")
                    print(method, name, seed, "from", found["from"], flush=True)
                    continue
                start = time.time()
                config = RunConfig.from_mapping({**base, **overrides})
                out = run(config, bound, args.max_rows, args.verify, args.eval_every, scaled)
                out.update(method=method, name=name, seed=seed, seconds=time.time() - start)
                record["runs"].append(out)
                write(results, json.dumps(record, indent=1) + "\n")
                write(args.out, table(record, names, shares))
                print(method, name, seed, f"{out['seconds']:.0f} s", out["history"][-1], flush=True)
    write(args.out, table(record, names, shares))
    print(f"wrote {args.out} and {results.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
