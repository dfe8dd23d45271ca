"""The report of ``bench/poisoning_secagg.py``: the table over seeds, each share's verdict
against the clean run and the seed-by-seed lines (Markdown, from the runs' JSON)."""

from __future__ import annotations

import statistics

from poisoning import value  # bench/ is the script's folder

#: The methods, in the report's order.
METHODS = ("pfedrec", "fedmf")

#: The clean run's name: no attack, no bound.
CLEAN = "clean, no bound"


def best_rounds(runs: list[dict]) -> list[dict]:
    """Each run's round of best validation HR@10 (the earliest on ties)."""
    return [max(r["history"], key=lambda h: (h["val-hr@10"], -h["round"])) for r in runs]


def hr_cost(best: list[dict], base: list[dict]) -> float:
    """The drop (%) of the mean test HR@10 at the best rounds against the clean runs'."""
    hr = statistics.mean(b["test-hr@10"] for b in best)
    hr_clean = statistics.mean(b["test-hr@10"] for b in base)
    return 100 * (hr_clean - hr) / hr_clean if hr_clean else float("nan")


def verdict(method: str, name: str, runs: list[dict], clean: list[dict]) -> str:
    """Whether a malicious run holds ER@10 <= 2x clean at <= 2 % HR@10 cost, over its seeds."""
    best, base = best_rounds(runs), best_rounds(clean)
    er = statistics.mean(b["er@10"] for b in best)
    er_clean = statistics.mean(b["er@10"] for b in base)
    hr = statistics.mean(b["test-hr@10"] for b in best)
    hr_clean = statistics.mean(b["test-hr@10"] for b in base)
    cost = hr_cost(best, base)
    points = 100 * (hr_clean - hr)
    met = er <= 2 * er_clean and cost <= 2.0
    seeds = ",".join(str(r["seed"]) for r in runs)
    above = rounds_above(runs, clean)
    every = (
        f"; rounds whose ER@10 passes 2x the clean run's at that round: {', '.join(above)}"
        if above
        else "; ER@10 <= 2x the clean run's at every evaluated round"
    )
    return (
        f"- {method}, {name}, seeds {seeds}: ER@10 {100 * er:.2f} against 2x the clean "
        f"run's (no attack, no bound) {200 * er_clean:.2f}; test HR@10 {100 * hr:.2f} against "
        f"the clean run's (no attack, no bound) {100 * hr_clean:.2f}, a cost of {cost:+.1f} % "
        f"of it ({points:+.2f} points; mean over the seeds, at each run's best validation "
        "round): "
        f"{'met' if met else 'not met'} (ER@10 <= 2x clean at <= 2 % HR@10 cost){every}"
    )


def rounds_above(runs: list[dict], clean: list[dict]) -> list[str]:
    """``seed:round (ER@10 against the clean run's)`` of each evaluated round whose ER@10
    passes twice the clean run's of the same seed and round."""
    out = []
    for r in runs:
        base = next(c for c in clean if c["seed"] == r["seed"])
        theirs = {h["round"]: h["er@10"] for h in base["history"]}
        for h in r["history"]:
            if h["round"] in theirs and h["er@10"] > 2 * theirs[h["round"]]:
                out.append(
                    f"{r['seed']}:{h['round']} ({100 * h['er@10']:.2f} against "
                    f"{100 * theirs[h['round']]:.2f})"
                )
    return out


#: The evaluated rounds at the end of a run whose test HR@10 the seed lines average.
LAST = 5


def seed_line(run: dict, clean: dict) -> str:
    """A run's test HR@10 on one seed: at its best validation round (with the rounds whose
    validation HR@10 ties it: the earliest is taken), at the last round and over the last
    :data:`LAST` evaluated rounds, against the clean run's of the same seed."""

    def figures(r: dict) -> tuple[dict, list[int], float, float]:
        history = r["history"]
        best = max(history, key=lambda h: (h["val-hr@10"], -h["round"]))
        tied = [h["round"] for h in history if h["val-hr@10"] == best["val-hr@10"]]
        tail = statistics.mean(h["test-hr@10"] for h in history[-LAST:])
        return best, tied, history[-1]["test-hr@10"], tail

    best, tied, last, tail = figures(run)
    text = (
        f"- {run['method']}, {run['name']}, seed {run['seed']}: test HR@10 "
        f"{100 * best['test-hr@10']:.2f} at the best validation round {best['round']}"
        + (
            f" (validation HR@10 tied at rounds {', '.join(map(str, tied))})"
            if len(tied) > 1
            else ""
        )
        + f", {100 * last:.2f} at the last round, {100 * tail:.2f} over the last {LAST} "
        "evaluated rounds"
    )
    if run is clean:
        return text
    base, _, base_last, base_tail = figures(clean)
    clean_hr = base["test-hr@10"]
    return text + (
        f"; the clean run's (no attack, no bound) {100 * clean_hr:.2f} (round {base['round']}),"
        f" {100 * base_last:.2f} and {100 * base_tail:.2f}: a cost of "
        f"{100 * (clean_hr - best['test-hr@10']) / clean_hr:+.1f} % "
        f"({100 * (clean_hr - best['test-hr@10']):+.2f} points) at the best validation round, "
        f"{100 * (base_tail - tail) / base_tail:+.1f} % over the last {LAST} rounds"
    )


def seed_lines(record: dict, names: list[str]) -> list[str]:
    """:func:`seed_line` of each run beside the clean run of its method and seed."""
    out = []
    for method in METHODS:
        mine = [r for r in record["runs"] if r["method"] == method]
        clean = {r["seed"]: r for r in mine if r["name"] == names[0]}
        for r in sorted(mine, key=lambda r: (names.index(r["name"]), r["seed"])):
            if r["seed"] in clean:
                out.append(seed_line(r, clean[r["seed"]]))
    return out


def bound_lines(record: dict, names: list[str]) -> list[str]:
    """Each run's bound by round, for runs whose bound follows the table."""
    out = []
    for r in sorted(record["runs"], key=lambda r: (r["method"], names.index(r["name"]), r["seed"])):
        used = r.get("bounds") or []
        if used and record["settings"].get("bound_scale", 0) > 0:
            shown = ", ".join(f"{b:.3g}" for b in used)
            out.append(f"- {r['method']}, {r['name']}, seed {r['seed']}: bound by round {shown}")
    return out


def summary(runs: list[dict], clean: list[dict]) -> list[str]:
    """The best-round figures of a run over its seeds (ER@10 and HR@10 against clean's)."""
    best, base = best_rounds(runs), best_rounds(clean)
    cost = hr_cost(best, base)
    peak = [max(h["er@10"] for h in r["history"]) for r in runs]
    return [
        ",".join(str(r["seed"]) for r in runs),
        ",".join(str(b["round"]) for b in best),
        value([b["test-hr@10"] for b in best]),
        f"{cost:+.1f}",
        value([b["er@10"] for b in best]),
        value([b["er@10"] for b in base]),
        value(peak),
        str(sum(r["verified-users"] for r in runs)),
        f"{statistics.median(r['seconds'] for r in runs):.0f}",
    ]


def table(record: dict, names: list[str], shares: set[str]) -> str:
    """The Markdown report: a row per run name in ``names`` over its seeds, and a verdict
    for each name in ``shares`` (a malicious share under the bound)."""
    settings, runs = record["settings"], record["runs"]
    lines = [
        "# Poisoning under bounded secure aggregation",
        "",
        f"ML-100K, strict (`conf/<method>-ml100k-strict.toml`), {settings['rounds']} rounds, "
        f"faithful mode (one contributor per user), `promote` with malicious-scale "
        f"{settings['scale']:g} and 1 target item, secure-aggregation-bound "
        f"{settings['bound']:g} (max-rows {settings['max_rows'] or 'every row'}): each user's "
        "change as its verified report carries it, the server's sum exact (runs named `no "
        "bound`: each user's plain upload, no defence); "
        f"{settings['verify']} users a round (malicious ones first) through the whole protocol, "
        "their decoded sum equal to theirs in the run. HR@10: test HR@10 (%) at the round of "
        "best validation HR@10 (evaluated every "
        f"{settings['eval_every']} rounds); cost: its drop against the clean run without a "
        "bound (% of it, negative: a gain); ER@10: the share (%) of users whose top 10 holds "
        "the target item, at that round, and the clean run's; max ER@10 over the evaluated rounds; "
        "verified: users whose reports went through the protocol; s: median seconds a run."
        + (
            f" The bound follows the table: each round's bound is {settings['bound_scale']:g} x "
            "the median row norm of the table as sent, at least "
            f"{settings['bound_floor']:g} and at most {settings['bound']:g} "
            "(`secure-aggregation-bound-scale`)."
            if settings.get("bound_scale", 0) > 0
            else ""
        ),
        "",
        "| method | run | seeds | best round | HR@10 | HR@10 cost % | ER@10 | clean ER@10 "
        "| max ER@10 | verified | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for method in METHODS:
        mine = [r for r in runs if r["method"] == method]
        clean = sorted((r for r in mine if r["name"] == names[0]), key=lambda r: r["seed"])
        for name in names:
            these = sorted((r for r in mine if r["name"] == name), key=lambda r: r["seed"])
            seeds = {r["seed"] for r in these}
            base = [r for r in clean if r["seed"] in seeds]
            if these and base:
                lines.append("| " + " | ".join([method, name, *summary(these, base)]) + " |")
                if name in shares:
                    verdicts.append(verdict(method, name, these, base))
    lines += ["", *verdicts, "", "Seed by seed:", "", *seed_lines(record, names)]
    shown = bound_lines(record, names)
    lines += ["", *shown] if shown else []
    lines += [
        "",
        "Commands: "
        + ", ".join(f"`FEDREC_DATA_DIR=../shared/datasets {c}`" for c in record["commands"]),
        "",
    ]
    return "\n".join(lines)
