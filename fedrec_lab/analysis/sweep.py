"""``fedrec analyze radius-sweep``: FedRecGEL's Figure 2, test HR@10 and NDCG@10 against each
SAM radius, the other held at the preset's, on ML-100K under both protocols, seeds 0-2.

FedRecGEL's text names the figure ("Effect of rho_ur and rho_co", four datasets) but not its
grid: ours is {0, 0.01, 0.1, 1} for each radius and the preset's own point (a grid value
equal to the preset's is that point). The runs are
experiment cells of the FedRecGEL preset with the radii as overrides
(``fedrecgel+rp<rho>`` varies the private radius, ``fedrecgel+rs<rho>`` the shared one,
``fedrecgel+sweep`` is the preset's point), each under the sweep's schedule:

- ``paper``: 30 rounds. The preset (the reference's learning rates) plateaus by round 10:
  with and without SAM, validation HR@10 at rounds 10, 50 and 100 is within half a point
  (``fedrecgel[-nosam]-ml100k-paper-seed*/rounds.csv``).
- ``strict``: 100 rounds, evaluated every 5 (validation still rises at round 100; a strict
  FedRecGEL round is mostly the full ranking).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from fedrec_lab.experiments import cells as runner
from fedrec_lab.presets import resolve

DATASET = "ml-100k"
GRID = (0.0, 0.01, 0.1, 1.0)
SEEDS = (0, 1, 2)
SCHEDULE = {
    "paper": {"num-server-rounds": 30},
    "strict": {"num-server-rounds": 100, "eval-every": 5},
}
KEYS = {"rp": "sam-rho-private", "rs": "sam-rho-shared"}


def preset_radii(protocol: str) -> dict[str, float]:
    row = runner.RowSpec("fedrecgel", DATASET, protocol)
    config = resolve(runner.preset_path(row))
    return {k: float(config[key]) for k, key in KEYS.items()}


def rows(protocol: str) -> list[runner.RowSpec]:
    """The sweep's rows under ``protocol``: each radius over the grid, the other at the
    preset's, and the preset's own point."""
    radii = preset_radii(protocol)
    out = [
        runner.RowSpec("fedrecgel", DATASET, protocol, "sweep", tuple(SCHEDULE[protocol].items()))
    ]
    for varied, key in KEYS.items():
        for value in GRID:
            if value == radii[varied]:  # the preset's own point (+sweep)
                continue
            overrides = {**SCHEDULE[protocol], key: value}
            other = "rs" if varied == "rp" else "rp"
            overrides[KEYS[other]] = radii[other]
            out.append(
                runner.RowSpec(
                    "fedrecgel", DATASET, protocol, f"{varied}{value:g}", tuple(overrides.items())
                )
            )
    return out


def check_tags(tags: tuple[str, ...], protocols: tuple[str, ...]) -> None:
    """Refuse a row tag that names no row of the sweep under ``protocols``."""
    known = {row.tag for protocol in protocols for row in rows(protocol)}
    unknown = sorted(set(tags) - known)
    if unknown:
        raise SystemExit(
            f"--rows: {', '.join(unknown)} is not a row of the sweep; its rows: "
            + ", ".join(sorted(known))
        )


def run_missing(
    runs: Path,
    data_dir: str,
    nodes: int = 2,
    protocols: tuple[str, ...] | None = None,
    seeds: tuple[int, ...] | None = None,
    tags: tuple[str, ...] | None = None,
) -> None:
    """Run the sweep's missing cells (of ``protocols``, ``seeds`` and the rows tagged ``tags``
    only, if given). A finished cell (its ``summary.json`` in ``runs``) is kept, not rerun."""
    protocols = protocols or tuple(SCHEDULE)
    if tags:
        check_tags(tags, protocols)
    for protocol in protocols:
        for row in rows(protocol):
            if tags and row.tag not in tags:
                continue
            for cell in row.cells(list(seeds or SEEDS)):
                if (runs / cell.name / "summary.json").exists():
                    continue
                if (runs / cell.name).exists():
                    runner.set_aside(runs / cell.name)
                config = runner.run_config(cell, runs, data_dir, None, {})
                status = runner.run_federated(config, nodes, use_flwr=False)
                runner.scrub_paths(runs, only=(cell.name,))
                print(f"{cell.name}: {status}", flush=True)


def points(runs: Path) -> list[dict[str, Any]]:
    out = []
    for protocol in SCHEDULE:
        radii = preset_radii(protocol)
        for row in rows(protocol):
            done = [c for c in row.cells(list(SEEDS)) if (runs / c.name / "summary.json").exists()]
            summaries = [json.loads((runs / c.name / "summary.json").read_text()) for c in done]
            overrides = dict(row.overrides)
            out.append(
                {
                    "protocol": protocol,
                    "tag": row.tag,
                    "varied": row.tag[:2] if row.tag != "sweep" else "preset",
                    "private": overrides.get(KEYS["rp"], radii["rp"]),
                    "shared": overrides.get(KEYS["rs"], radii["rs"]),
                    "seeds": len(summaries),
                    "seed_list": [c.seed for c in done],
                    "hr": [100 * s["test"]["hr@10"] for s in summaries],
                    "ndcg": [100 * s["test"]["ndcg@10"] for s in summaries],
                    "best_rounds": [s["best_round"] for s in summaries],
                }
            )
    return out


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def coverage(found: list[dict[str, Any]]) -> str:
    """Which of the sweep's cells are measured, per protocol (a sweep with fewer seeds or rows
    than its grid is a reduced one, and says so)."""
    parts = []
    for protocol in SCHEDULE:
        points_ = [p for p in found if p["protocol"] == protocol]
        done = [p for p in points_ if p["seeds"]]
        seeds = sorted({s for p in points_ for s in p.get("seed_list", [])})
        text = f"{protocol}: {len(done)} of {len(points_)} rows"
        if seeds:
            text += f", seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}"
        parts.append(text)
    full = all(p["seeds"] == len(SEEDS) for p in found)
    line = f"Measured: {'; '.join(parts)} (the grid: seeds {SEEDS[0]}-{SEEDS[-1]} on every row)."
    if not full:
        line += (
            " A reduced sweep: fewer rows or seeds than the grid (a row with one seed has no "
            "spread to judge its differences by)."
        )
    return line


def measured_flags(found: list[dict[str, Any]]) -> list[str]:
    """The ``--protocols ... --seeds ... [--rows ...]`` that run the measured cells, one per
    measured protocol (``--rows`` where that protocol has rows not measured)."""
    out = []
    for protocol in SCHEDULE:
        points_ = [x for x in found if x["protocol"] == protocol]
        if not any(x["seeds"] for x in points_):
            continue
        seeds = sorted({s for x in points_ for s in x.get("seed_list", [])})
        flags = f" --protocols {protocol} --seeds {' '.join(map(str, seeds))}"
        if any(not x["seeds"] for x in points_):
            flags += f" --rows {' '.join(x['tag'] for x in points_ if x['seeds'])}"
        out.append(flags)
    return out


def markdown(found: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# FedRecGEL's radius sweep (its Figure 2), ML-100K",
        "",
        "```bash",
        command,
        "```",
        "",
        coverage(found),
        "",
        "| protocol | row | rho private | rho shared | seeds | test HR@10 | test NDCG@10 | best "
        "rounds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in found:
        lines.append(
            f"| {p['protocol']} | fedrecgel+{p['tag']} | {p['private']:g} | {p['shared']:g} "
            f"| {p['seeds']} | {_ms(p['hr'])} | {_ms(p['ndcg'])} "
            f"| {', '.join(map(str, p['best_rounds'])) or '-'} |"
        )
    lines += [
        "",
        "Test metrics (%) at the best validation round, mean ± std over the seeds. One radius "
        "varies over {" + ", ".join(f"{g:g}" for g in GRID) + "}, the other stays at the "
        "preset's (`+sweep`). Schedule: "
        + "; ".join(
            f"{p}: " + ", ".join(f"{k} = {v}" for k, v in s.items()) for p, s in SCHEDULE.items()
        )
        + " (docs/methods/sam.md says why).",
    ]
    return "\n".join(lines) + "\n"


def plot(found: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, protocol in zip(axes, SCHEDULE, strict=True):
        for varied, label, color in (
            ("rp", "rho private (user)", "C0"),
            ("rs", "rho shared (common)", "C1"),
        ):
            pts = sorted(
                (
                    p
                    for p in found
                    if p["protocol"] == protocol
                    and p["varied"] in (varied, "preset")  # each curve through the preset's
                    and p["hr"]
                ),
                key=lambda p: p[KEYS[varied].split("-")[-1]],
            )
            xs = [p["private"] if varied == "rp" else p["shared"] for p in pts]
            ys = [statistics.mean(p["hr"]) for p in pts]
            es = [statistics.stdev(p["hr"]) if len(p["hr"]) > 1 else 0 for p in pts]
            ax.errorbar(xs, ys, yerr=es, marker="o", label=label, color=color, capsize=3)
        ax.set_xscale("symlog", linthresh=0.001)  # the strict preset's radii are below 0.01
        ax.set_xlim(-0.0002, 1.5)
        ax.set_xticks([0, 0.001, 0.01, 0.1, 1])
        ax.set_title(f"FedRecGEL, ML-100K, {protocol}", fontsize=9)
        ax.set_xlabel("radius (the other at the preset's)")
        ax.set_ylabel("test HR@10 (%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(runs: Path, out: Path, command: str) -> Path:
    found = points(runs)
    out.mkdir(parents=True, exist_ok=True)
    commands = "\n".join(command + flags for flags in measured_flags(found) or [""])
    (out / "fedrecgel-radius-sweep.md").write_text(markdown(found, commands))
    (out / "fedrecgel-radius-sweep.json").write_text(json.dumps(found) + "\n")
    plot(found, out / "fedrecgel-radius-sweep.png")
    return out / "fedrecgel-radius-sweep.md"
