"""The audit's markdown table: one row per (protocol, method, configuration)."""

from __future__ import annotations

import statistics
import tomllib


def parse_sets(pairs: list[str]) -> dict:
    """``key=value`` pairs, each value read as TOML (``1.5``, ``"gaussian"``) or a string."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected key=value, got '{pair}'")
        try:
            out[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = value
    return out


def cell(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    """'mean ± std' (std over seeds; '-' when there are none)."""
    values = [v * scale for v in values if v == v]
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {std:.{digits}f}"


def markdown(records: list[dict], attacks: tuple[str, ...], command: str) -> str:
    """The table of every (protocol, method, configuration) over its seeds."""
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        key = (record["protocol"], record["method"], record["config"])
        groups.setdefault(key, []).append(record)
    head = ["protocol", "method", "config", "keys", "seeds", "test HR@10 (%)", "vs none*"]
    head += ["test NDCG@10 (%)"]
    head += [f"{a} AUC" for a in attacks] + [f"{a} F1" for a in attacks] + ["random F1"]
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
        row += [cell([r["attacks"][a]["auc"] for r in runs], digits=3) for a in attacks]
        row += [cell([r["attacks"][a]["f1"] for r in runs], digits=3) for a in attacks]
        row += [cell([r["attacks"]["random-f1"] for r in runs], digits=3)]
        lines.append("| " + " | ".join(row) + " |")
    first = records[0]
    note = (
        f"\n{first['dataset']}, {first['rounds']} rounds, "
        + (f"{first['nodes']} nodes in-process (Flower)" if first["nodes"] else "plain loop")
        + "; test HR@10 at the best validation round; "
        f"attacks on {first['users']} sampled users' "
        f"uploads (one user per upload) in rounds {first['audit_rounds']}, mean over users and "
        "rounds, then mean ± std over seeds. AUC 0.5 and 'random F1' are a random guess. "
        "*: relative change of the mean test HR@10 against no protection on the same seeds.\n\n"
        f"Command: `{command}`\n"
    )
    return "\n".join(lines) + "\n" + note
