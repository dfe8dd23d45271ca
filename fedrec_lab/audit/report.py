"""The audit's markdown table: one row per (protocol, method, configuration)."""

from __future__ import annotations

import statistics


def parse_sets(pairs: list[str]) -> dict:
    """``key=value`` pairs, each value read as its key's type (``1.5``, ``gaussian``:
    :func:`fedrec_lab.launch.run_config.parse_overrides`)."""
    from fedrec_lab.launch.run_config import ConfigError, parse_overrides

    try:
        return parse_overrides(pairs)
    except ConfigError as error:
        raise SystemExit(str(error)) from None


EPSILONS = ("epsilon-median", "epsilon-max")


def levels_delta(records: list[dict]) -> str:
    """The delta of the user-level epsilons in ``records`` ('-' when there are none)."""
    deltas = sorted({r["user_level"]["delta"] for r in records if r.get("user_level")})
    return ", ".join(f"{d:g}" for d in deltas) or "-"


def cell(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    """'mean ± std' (std over seeds; '-' when there are none)."""
    values = [v * scale for v in values if v == v]
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {std:.{digits}f}"


def user_epsilon(runs: list[dict]) -> str:
    """'median / max' of the users' epsilon over the run (mean over seeds; the accountant's
    :meth:`~fedrec_flwr.privacy.accounting.RowCounter.user_levels`), '-' without LDP."""
    levels = [r["user_level"] for r in runs if r.get("user_level")]
    if not levels:
        return "-"
    median, worst = (statistics.mean(level[k] for level in levels) for k in EPSILONS)
    return f"{median:.3g} / {worst:.3g}"


def score(record: dict, attack: str, measure: str) -> float:
    """An attack's ``auc`` or ``f1`` in a record (NaN where the record predates it)."""
    return record["attacks"].get(attack, {}).get(measure, float("nan"))


def max_auc(record: dict, attacks: tuple[str, ...]) -> float:
    """The strongest attack's AUC in a record (NaN: none scored)."""
    values = [v for a in attacks if (v := score(record, a, "auc")) == v]
    return max(values) if values else float("nan")


EXPOSURE_NOTE = (
    " ER@10: the share of users whose top 10 holds the malicious clients' target item, at "
    "the best validation round; max ER@10: its largest over the evaluated rounds."
)


def exposure(record: dict, which: str) -> float:
    """A record's target ER@10 (``best`` or ``max``; NaN without a malicious attack)."""
    return record.get("exposure", {}).get(which, float("nan"))


def markdown(records: list[dict], attacks: tuple[str, ...], command: str) -> str:
    """The table of every (protocol, method, configuration) over its seeds."""
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        key = (record["protocol"], record["method"], record["config"])
        groups.setdefault(key, []).append(record)
    head = ["protocol", "method", "config", "keys", "seeds", "test HR@10 (%)", "vs none*"]
    head += ["test NDCG@10 (%)", "user ε median / max"]
    exposed = any("exposure" in r for r in records)  # a malicious attack's target
    if exposed:
        head += ["ER@10 (%)", "max ER@10 (%)"]
    head += ["max AUC"] + [f"{a} AUC" for a in attacks] + [f"{a} F1" for a in attacks]
    head += ["random F1"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (protocol, method, config), runs in groups.items():
        hr = [r["test"]["hr@10"] for r in runs]
        base = groups.get((protocol, method, "none"), groups.get((protocol, method, "lambda=0")))
        change = "-"
        if base and config not in ("none", "lambda=0"):  # against the same seeds
            ref = {r["seed"]: r["test"]["hr@10"] for r in base}
            pairs = [(r["test"]["hr@10"], ref[r["seed"]]) for r in runs if r["seed"] in ref]
            if pairs:
                mine, theirs = (statistics.mean(p) for p in zip(*pairs, strict=True))
                change = f"{100 * (mine - theirs) / theirs:+.1f} %"
        keys = ", ".join(f"{k}={v}" for k, v in runs[0]["keys"].items()) or "-"
        row = [protocol, method, config, keys, ",".join(str(r["seed"]) for r in runs)]
        row += [cell(hr, 100), change, cell([r["test"]["ndcg@10"] for r in runs], 100)]
        row += [user_epsilon(runs)]
        if exposed:
            row += [cell([exposure(r, "best") for r in runs], 100)]
            row += [cell([exposure(r, "max") for r in runs], 100)]
        row += [cell([max_auc(r, attacks) for r in runs], digits=3)]
        row += [cell([score(r, a, "auc") for r in runs], digits=3) for a in attacks]
        row += [cell([score(r, a, "f1") for r in runs], digits=3) for a in attacks]
        row += [cell([r["attacks"]["random-f1"] for r in runs], digits=3)]
        lines.append("| " + " | ".join(row) + " |")
    first = records[0]
    note = (
        f"\n{first['dataset']}, {first['rounds']} rounds, "
        + (f"{first['nodes']} nodes in-process (Flower)" if first["nodes"] else "plain loop")
        + "; test HR@10 at the best validation round; "
        f"attacks on {first['users']} sampled users' "
        f"uploads (one user per upload) in rounds {first['audit_rounds']}, mean over users and "
        "rounds, then mean ± std over seeds. User ε: the median and the worst user's epsilon "
        f"over every row they uploaded in the run, at delta {levels_delta(records)} (Google's "
        "dp-accounting; docs/privacy.md, Accounting). AUC 0.5 and 'random F1' are a random guess. "
        "*: relative change of the mean test HR@10 against no protection on the same seeds."
        + (EXPOSURE_NOTE if exposed else "")
        + "\n\n"
        f"Command: `{command}`\n"
    )
    return "\n".join(lines) + "\n" + note + (by_round(groups) if exposed else "")


def by_round(groups: dict[tuple, list[dict]]) -> str:
    """The target's ER@10 (%) at each evaluated round, a column per (method, configuration)
    under a malicious attack (mean ± std over its seeds)."""
    exposed = {key: runs for key, runs in groups.items() if any("exposure" in r for r in runs)}
    rounds = sorted({int(n) for runs in exposed.values() for r in runs for n in rounds_of(r)})
    head = ["round"] + [f"{method} {config} ER@10 (%)" for _, method, config in exposed]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in rounds:
        row = [str(n)]
        row += [
            cell([rounds_of(r).get(n, float("nan")) for r in runs], 100)
            for runs in exposed.values()
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\nThe target's ER@10 at each evaluated round:\n\n" + "\n".join(lines) + "\n"


def rounds_of(record: dict) -> dict[int, float]:
    """A record's target ER@10 at each evaluated round (round: ER@10; JSON keys are text)."""
    return {int(n): v for n, v in record.get("exposure", {}).get("rounds", {}).items()}
