"""Judges of the analyses' reports (``fedrec analyze``): the SAM table, FedRecGEL's radius
sweep and PFedRec's Figure 3.

Each reads the rows of a committed JSON report and returns ``(ours, verdict, why)`` for
:func:`fedrec_lab.claims.verdicts.json_values`. A row counts for a claim when its paired 95 %
interval (over users, values averaged over the row's seeds) lies on one side of 0.
"""

from __future__ import annotations

from collections.abc import Callable

from fedrec_lab.analysis import devices, rejections
from fedrec_lab.analysis.early import EARLY_SHARE
from fedrec_lab.analysis.sweep import SCHEDULE
from fedrec_lab.claims.verdicts import (
    CONTRADICTED,
    NOT_MEASURABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
    json_values,
)

SAM_TABLE = "bench/results/sam-table.json"
FIGURE3 = "bench/results/pfedrec-figure3.json"
SWEEP = "bench/results/fedrecgel-radius-sweep.json"

Judge = Callable[[list], tuple[str, str, str]]


def _seeds(seeds: list[int]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def _interval(d: dict, fmt: str) -> str:
    return f"{fmt.format(d['mean'])} [{fmt.format(d['low'])}, {fmt.format(d['high'])}]"


def _majority(wanted: int, opposite: int, rows: int) -> str:
    if wanted > rows / 2:
        return REPRODUCED
    if opposite > rows / 2:
        return CONTRADICTED
    return NOT_REPRODUCED


def _early(row: dict) -> str:
    """A SAM-table row's runs whose best round is early (its ``early_best``), e.g.
    `` (early best round: with SAM seed 1 at round 2)``; "" when none."""
    early = row.get("early_best") or []
    if not early:
        return ""
    runs = ", ".join(f"{e['side']} SAM seed {e['seed']} at round {e['round']}" for e in early)
    return f" (early best round: {runs})"


def _mixed(row: dict) -> str:
    """A SAM-table row's seeds whose two runs were trained on different devices (its
    ``mixed_devices``), e.g. `` (devices: seed 0 without SAM on cpu, with SAM on cuda)``;
    "" when none."""
    mixed = row.get("mixed_devices") or []
    if not mixed:
        return ""
    return f" (devices: {devices.mixed_text(mixed, ' ', '; ')})"


def _left_out(row: dict) -> str:
    """A SAM-table row's seeds left out for a node's reply left out (its ``left_out``), e.g.
    `` (left out: seed 2 with SAM (from round 19))``; "" when none."""
    left_out = row.get("left_out") or []
    return f" (left out: {rejections.text(left_out)})" if left_out else ""


def sam_effect(key: str, lower_is_claimed: bool, method: str | None = None) -> Judge:
    """SAM minus without on the SAM table's measure ``key``, over the measured rows of
    ``method`` (None: every method): reproduced when most rows lie beyond the interval in the
    claimed direction, contradicted when most lie in the other."""

    def judge(values: list) -> tuple[str, str, str]:
        rows = [r for r in values[0] if r["seeds"] and method in (None, r["method"])]
        if not rows:
            return "-", NOT_MEASURABLE, f"the SAM table has no {method or 'measured'} row"
        fmt = "{:+.2f}" if key == "hr@10" else "{:+.3g}"
        parts, below, above, judged = [], 0, 0, 0
        for r in rows:
            d = r[key].get("difference")
            who = "" if method else f"{r['method']} "
            where = f"{who}{r['dataset']} {r['protocol']} ({_seeds(r['seeds'])})"
            notes = _early(r) + _mixed(r) + _left_out(r)
            if d is None:  # a run without its users' values: no paired interval
                parts.append(f"{where}: no interval (per-user values not recorded){notes}")
                continue
            parts.append(f"{where}: {_interval(d, fmt)}{notes}")
            below += d["high"] < 0
            above += d["low"] > 0
            judged += 1
        if not judged:
            return "; ".join(parts), NOT_MEASURABLE, "no row has per-user values to pair"
        wanted, opposite = (below, above) if lower_is_claimed else (above, below)
        why = (
            f"SAM minus without, paired over users: the claimed direction beyond the interval "
            f"in {wanted} of {judged} rows, the opposite in {opposite}"
        )
        if judged < len(rows):
            left = len(rows) - judged
            why += f"; {left} row{'s' * (left > 1)} without an interval (no per-user values)"
        early = sum(bool(r.get("early_best")) for r in rows)
        if early:
            why += (
                f"; {early} of the {len(rows)} rows compare a run whose best round is in the "
                f"first {EARLY_SHARE * 100:g} % of its rounds (a barely trained model)"
            )
        mixed = sum(bool(r.get("mixed_devices")) for r in rows)
        if mixed:
            why += (
                f"; {mixed} of the {len(rows)} rows pair runs trained on different devices "
                "(the CPU and CUDA: they differ by the device as well as by SAM)"
            )
        left_out = sum(bool(r.get("left_out")) for r in rows)
        if left_out:
            why += (
                f"; {left_out} of the {len(rows)} rows leave out a seed whose run had a "
                "node's reply left out (it measures part of the users only)"
            )
        return "; ".join(parts), _majority(wanted, opposite, judged), why

    return judge


def own_rows_help(protocol: str) -> Judge:
    """PFedRec's Figure 3 under ``protocol``: a user's own item rows against the global and
    a random user's (test HR@10, own minus other)."""

    def judge(values: list) -> tuple[str, str, str]:
        rows = [r for r in values[0] if r["family"] == "pfedrec" and r["protocol"] == protocol]
        parts, wins = [], 0
        for r in rows:
            g, x = r["own - global"], r["own - random"]
            parts.append(
                f"{r['dataset']} ({_seeds(r['seeds'])}): own - global {_interval(g, '{:+.2f}')}, "
                f"own - random {_interval(x, '{:+.2f}')}"
            )
            wins += g["low"] > 0 and x["low"] > 0
        losses = sum(r["own - global"]["high"] < 0 for r in rows)
        why = f"own above both beyond the interval on {wins} of {len(rows)} datasets"
        if protocol == "strict":
            why += "; under strict a user keeps only its train positives' rows, never ranked"
        return "; ".join(parts), _majority(wins, losses, len(rows)), why

    return judge


def radius_spread(values: list) -> tuple[str, str, str]:
    """FedRecGEL's Figure 2 on the sweep's measured rows: test HR@10 at each value of each
    radius (the other at the preset's), per protocol, and how far it moves over the grid."""
    parts, spans = [], []
    for protocol in ("paper", "strict"):
        found = [p for p in values[0] if p["protocol"] == protocol and p["hr"]]
        if not found:
            continue
        seeds = sorted({s for p in found for s in p["seed_list"]})
        rounds = f"{SCHEDULE[protocol]['num-server-rounds']} rounds"
        curves = []
        preset = [p for p in found if p["varied"] == "preset"]
        for varied, key in (("rp", "private"), ("rs", "shared")):
            pts = sorted([p for p in found if p["varied"] == varied] + preset, key=lambda p: p[key])
            hr = [sum(p["hr"]) / len(p["hr"]) for p in pts]
            curves.append(
                f"{key} " + ", ".join(f"{p[key]:g}: {h:.2f}" for p, h in zip(pts, hr, strict=True))
            )
            spans.append(f"{protocol} {key} {max(hr) - min(hr):.2f}")
        parts.append(f"{protocol} ({_seeds(seeds)}, {rounds}): " + "; ".join(curves))
    if not parts:
        return "-", NOT_MEASURABLE, "the sweep has no measured row"
    why = (
        "Fig. 2 prints curves, no numbers to compare; ours moves over each radius's grid by "
        + ", ".join(spans)
        + " HR@10 points (the other radius at the preset's)"
    )
    return "; ".join(parts), NOT_MEASURABLE, why


def sweep() -> list[Claim]:
    """FedRecGEL's Figure 2 (its radius sweep), from the sweep's report."""
    return [
        Claim(
            "FedRecGEL",
            "Fig. 2",
            "HR@10 and NDCG@10 against each SAM radius, rho_ur (private) and rho_co (shared), "
            "the other held (four datasets)",
            "curves",
            json_values(SWEEP, [()], radius_spread),
        )
    ]


def sam() -> list[Claim]:
    """What SAM does, from the SAM table (each method with and without SAM)."""
    table = SAM_TABLE
    return [
        Claim(
            "FedRecGEL",
            "abstract",
            "SAM improves FedRecGEL's recommendations (its ablation: both radii 0)",
            "improves",
            json_values(table, [()], sam_effect("hr@10", False, "FedRecGEL")),
        ),
        Claim(
            "FedRecGEL",
            "Fig. 1, 3",
            "SAM finds flatter minima than the same model without it (top Hessian eigenvalue "
            "of the local loss)",
            "flatter landscapes (pictures)",
            json_values(table, [()], sam_effect("mean_lambda_max", True, "FedRecGEL")),
        ),
        Claim(
            "FedRecGEL",
            "Sec. 4, Lemma 1",
            "SAM narrows the generalization gap (validation minus train BCE at the best round)",
            "a bound, no figure",
            json_values(table, [()], sam_effect("gap", True, "FedRecGEL")),
        ),
        Claim(
            "SAM",
            "Foret et al.",
            "SAM finds flatter minima, on every method it is applied to (top Hessian eigenvalue)",
            "flatter",
            json_values(table, [()], sam_effect("mean_lambda_max", True)),
        ),
        Claim(
            "SAM",
            "Foret et al.",
            "SAM improves generalization, on every method it is applied to (test HR@10)",
            "better",
            json_values(table, [()], sam_effect("hr@10", False)),
        ),
    ]
