"""Privacy audit: ``python -m fedrec_lab.audit.command`` runs each (method, configuration, seed)
in-process, attacks sampled users' uploads (:mod:`fedrec_lab.audit.attacks`) and writes
``<out>/<tag>.json`` (every run, merged with what the file holds) and ``<out>/<tag>.md``
(mean ± std over seeds: test HR@10 and each attack's AUC and F1).

    # the table: no protection / LDP / decoys / both (strict, ML-100K)
    python -m fedrec_lab.audit.command --methods pfedrec fedmf --seeds 0 1 2
    # the decoys built against the attacks that know them
    python -m fedrec_lab.audit.command --configs none decoys decoys-trained \
        decoys-as-positives fixed-requests
    # what an item-item method's sums tell its server
    python -m fedrec_lab.audit.command --sums itemitem-ease-ml100k-strict \
        itemitem-ease-secure-ml100k-strict --tag sums-itemitem
    # PFedRec Table 4: raw Laplace lambda 0 .. 0.5, paper protocol
    python -m fedrec_lab.audit.command --methods pfedrec --protocol paper --tag table4-paper \\
        --lambdas 0 0.1 0.2 0.3 0.4 0.5

Without ``--out`` the files go to ``./fedrec-out/audit`` (:mod:`fedrec_lab.scratch`);
the committed tables take ``--out bench/results/privacy``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fedrec_flwr.schema import Scalar
from fedrec_lab import progress
from fedrec_lab.audit import sums
from fedrec_lab.audit.report import markdown, parse_sets
from fedrec_lab.audit.run import ATTACKS, auditable_methods, audited_run, imitation_of, preset
from fedrec_lab.scratch import HelpFormatter, add_data_dir, add_out, wrote

#: The audited configurations (run-config keys on top of the method's preset); ``--ldp``
#: and ``--decoys`` override the keys of the protected ones. LDP: Gaussian, epsilon 4 per
#: row, the clip the method declares (``AuditImitation.ldp_clip``: about the median norm of
#: a user's row change without protection; PFedRec 15, FedMF 3: its item rows move less).
LDP: dict[str, Scalar] = {"ldp-mechanism": "gaussian", "ldp-epsilon": 4.0, "ldp-delta": 1e-5}
DECOYS: dict[str, Scalar] = {"decoy-ratio": 16.0}
#: Decoys built against an attacker who knows them: popularity-matched, trained with the
#: user's samples (as negatives, or as positives so that they move like its real rows), and
#: a fixed request size (``fedrec_flwr.privacy.decoys``).
MATCHED: dict[str, Scalar] = {"decoy-selection": "popularity"}
TRAINED: dict[str, Scalar] = {"decoy-ratio": 4.0, "decoy-updates": "negatives", **MATCHED}
AS_POSITIVES: dict[str, Scalar] = {"decoy-ratio": 4.0, "decoy-updates": "positives", **MATCHED}
FIXED: dict[str, Scalar] = {
    "decoy-ratio": 1.0,
    "decoy-updates": "negatives",
    "decoy-request-size": 800,
    **MATCHED,
}
#: Secure aggregation (``fedrec_flwr.privacy.secagg``): the attacks see each user's masked
#: vector and its full-table request; seeded keys make the audited uploads reproducible.
#: ``secagg-ldp`` adds ``ldp``'s noise on the device, under the mask: the user-level epsilon
#: holds even against a server that unmasks (secure aggregation refuses decoys).
#: ``secagg-bounded``: every user's change proven within 25 per row
#: (``secure-aggregation-bound``); the server sees the leader's share of each report.
#: ``secagg-bounded-promote``: the same beside 5 % ``promote`` clients (scale 100, one
#: target item: ``bench/poisoning_secagg.py``'s attack), evaluated every round so that the
#: report holds the target's ER@10 at each (``strict`` only: ER@10 is a full ranking's).
#: ``secagg-scaled``: each round's bound 20 x the table's median row norm, between 1 and 25
#: (``secure-aggregation-bound-scale``); ``-promote`` beside 5 % ``promote`` clients,
#: ``-promote1`` beside 1 %.
SECAGG: dict[str, Scalar] = {"secure-aggregation": True, "secure-aggregation-keys": "seeded"}
BOUNDED: dict[str, Scalar] = {**SECAGG, "secure-aggregation-bound": 25.0}
SCALED: dict[str, Scalar] = {
    **BOUNDED,
    "secure-aggregation-bound-scale": 20.0,
    "secure-aggregation-bound-floor": 1.0,
}
PROMOTE: dict[str, Scalar] = {
    "malicious-fraction": 0.05,
    "malicious-attack": "promote",
    "malicious-scale": 100.0,
}
CONFIGS: dict[str, dict[str, Scalar]] = {
    "none": {},
    "ldp": LDP,
    "decoys": DECOYS,
    "both": {**LDP, **DECOYS},
    "decoys-trained": TRAINED,
    "decoys-as-positives": AS_POSITIVES,
    "fixed-requests": FIXED,
    "secagg": SECAGG,
    "secagg-ldp": {**SECAGG, **LDP},
    "secagg-bounded": BOUNDED,
    "secagg-bounded-promote": {**BOUNDED, **PROMOTE, "eval-every": 1},
    "secagg-scaled": SCALED,
    "secagg-scaled-promote": {**SCALED, **PROMOTE, "eval-every": 1},
    "secagg-scaled-promote1": {**SCALED, **PROMOTE, "malicious-fraction": 0.01, "eval-every": 1},
}
#: The configurations run when ``--configs`` is not given (the earlier table's four).
DEFAULT_CONFIGS = ["none", "ldp", "decoys", "both"]


def config_keys(name: str, method: str, ldp: dict, decoys: dict) -> dict:
    """The keys of configuration ``name`` for ``method`` (with the overrides)."""
    keys = dict(CONFIGS[name])
    if "ldp-mechanism" in keys:
        keys.update({"ldp-clip": imitation_of(method).ldp_clip, **ldp})
    if "decoy-ratio" in keys:
        keys.update(decoys)
    return keys


def recorded_commands(record: dict) -> list[str]:
    """The command(s) a result file records: ``command`` (one run) or ``commands`` (merged)."""
    if "command" in record:
        return [record["command"]]
    return list(record.get("commands", []))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter
    )
    methods = auditable_methods()
    parser.add_argument("--methods", nargs="+", default=methods, choices=methods)
    parser.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, choices=list(CONFIGS))
    parser.add_argument("--lambdas", nargs="+", type=float, help="PFedRec Table 4 sweep")
    parser.add_argument("--protocol", default="strict", choices=["strict", "paper"])
    parser.add_argument("--dataset", default="ml-100k")
    add_data_dir(parser)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--audit-rounds", nargs="+", type=int, default=[1, 50, 100])
    parser.add_argument("--users", type=int, default=100, help="audited users (seeded)")
    parser.add_argument("--nodes", type=int, default=2, help="0: the plain loop, no Flower")
    parser.add_argument("--prepared", default="", help="a prepared split folder (plain loop)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (processes)")
    parser.add_argument("--ldp", nargs="*", default=[], help="key=value for the LDP ones")
    parser.add_argument("--decoys", nargs="*", default=[], help="key=value for the decoy ones")
    parser.add_argument("--name", default="", help="suffix of the configurations' names")
    add_out(parser, "audit", "<tag>.json and <tag>.md")
    parser.add_argument("--tag", default="audit-ml100k")
    parser.add_argument("--merge", nargs="+", help="only merge these result files into --tag")
    parser.add_argument(
        "--sums",
        nargs="+",
        metavar="PRESET",
        help="instead: what the server of these item-item presets learns from the sums "
        "(fedrec_lab/audit/sums.py; no attack is run)",
    )
    progress.add_switch(parser)
    return parser


def check_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The arguments of ``main``, checked (SystemExit with the reason if not): nothing runs."""
    args = parser().parse_args(argv)
    parse_sets(args.ldp), parse_sets(args.decoys)
    return args


def main(argv: list[str] | None = None) -> None:
    args = check_arguments(argv)
    if args.merge:  # one table from several runs' files (e.g. the table and its sweeps)
        merge([Path(f) for f in args.merge], Path(args.out), args.tag)
        return
    if args.sums:
        command = "python -m fedrec_lab.audit.command " + " ".join(
            shown_argv(progress.without_switch(argv if argv is not None else _argv()))
        )
        wrote(sums.write(args.sums, args.data_dir, Path(args.out), args.tag, command), "sums")
        return

    ldp, decoys = parse_sets(args.ldp), parse_sets(args.decoys)
    configs = {
        method: {name: config_keys(name, method, ldp, decoys) for name in args.configs}
        for method in args.methods
    }
    if args.lambdas is not None:
        lambdas = {f"lambda={lam:g}": {"ldp-laplace-lambda": lam} for lam in args.lambdas}
        configs = dict.fromkeys(args.methods, lambdas)
    if args.name:
        configs = {m: {f"{n}-{args.name}": k for n, k in c.items()} for m, c in configs.items()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.tag}.json"
    records = json.loads(path.read_text())["runs"] if path.exists() else []
    command = "python -m fedrec_lab.audit.command " + " ".join(
        shown_argv(progress.without_switch(argv if argv is not None else _argv()))
    )
    jobs = [
        (method, name, keys, seed)
        for seed in args.seeds
        for method in args.methods
        for name, keys in configs[method].items()
    ]

    settings = {
        k: getattr(args, k)
        for k in ("protocol", "dataset", "rounds", "audit_rounds", "users", "nodes", "prepared")
    }
    settings["data_dir"] = str(Path(args.data_dir).resolve()) if args.data_dir else ""

    def keep(record: dict) -> None:
        nonlocal records
        records = [r for r in records if any(r[k] != record[k] for k in RUN_KEY)]
        records.append(record)
        records.sort(key=lambda r: (r["protocol"], r["method"], r["seed"]))
        path.write_text(json.dumps({"command": command, "runs": records}, indent=1) + "\n")
        (out / f"{args.tag}.md").write_text(markdown(records, ATTACKS, command))
        hr = record["test"]["hr@10"]
        print(f"{record['method']} {record['config']} seed {record['seed']}: HR@10 {hr:.4f}")

    if args.jobs <= 1:
        with progress.bar(len(jobs), "audit", unit="run", enabled=args.progress) as bar:
            for job in jobs:
                keep(run_job(settings, job))
                bar.update()
        wrote(out / f"{args.tag}.md", "audit table")
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_job, settings, job) for job in jobs]  # forked before the bar
        with progress.bar(len(jobs), "audit", unit="run", enabled=args.progress) as bar:
            for future in as_completed(futures):
                keep(future.result())
                bar.update()
    wrote(out / f"{args.tag}.md", "audit table")


#: What tells two runs apart in a result file (a rerun of the same replaces the earlier).
RUN_KEY = ("method", "config", "protocol", "dataset", "seed", "rounds")


def merge(files: list[Path], out: Path, tag: str) -> None:
    """Write ``<out>/<tag>.json`` (every run of ``files``, the commands they record) and
    ``<tag>.md``; a run found in two files is an error (the table would count it twice)."""
    records = [json.loads(f.read_text()) for f in files]
    runs = [run for record in records for run in record["runs"]]
    seen: set[tuple] = set()
    for run in runs:
        key = tuple(run[k] for k in RUN_KEY)
        if key in seen:
            raise SystemExit(
                f"--merge: the run {dict(zip(RUN_KEY, key, strict=True))} is in more than one "
                "file; merge each run once (leave out the file whose copy is not wanted)"
            )
        seen.add(key)
    runs.sort(key=lambda r: (r["protocol"], r["method"], r["seed"]))
    commands = [c for record in records for c in recorded_commands(record)]
    out.mkdir(parents=True, exist_ok=True)
    merged = json.dumps({"commands": commands, "runs": runs}, indent=1) + "\n"
    (out / f"{tag}.json").write_text(merged)
    (out / f"{tag}.md").write_text(markdown(runs, ATTACKS, "`, `".join(commands)))
    wrote(out / f"{tag}.md", "audit table")


def run_job(settings: dict, job: tuple) -> dict:
    """One audited run (``job``: method, configuration name, its keys, seed) as a record."""
    import torch

    torch.set_num_threads(1)
    method, name, keys, seed = job
    mapping = {
        **preset(method, settings["protocol"], settings["dataset"]),
        "num-server-rounds": settings["rounds"],
        "seed": seed,
        **({"data-dir": settings["data_dir"]} if settings.get("data_dir") else {}),
        **keys,
    }
    result = audited_run(
        mapping,
        settings["audit_rounds"],
        settings["users"],
        settings["nodes"],
        settings["prepared"],
    )
    engine = "flower in-process" if settings["nodes"] else "plain loop"
    return {
        "method": method,
        "config": name,
        "keys": keys,
        "seed": seed,
        **{k: v for k, v in settings.items() if k not in ("prepared", "data_dir")},
        "engine": engine,
        **result,
    }


def shown_argv(argv: list[str]) -> list[str]:
    """``argv`` as a report shows it: the value of ``--data-dir`` as DIR (a local path)."""
    previous = ["", *argv[:-1]]
    return [
        "DIR" if before == "--data-dir" else arg for before, arg in zip(previous, argv, strict=True)
    ]


def _argv() -> list[str]:
    import sys

    return sys.argv[1:]


if __name__ == "__main__":
    main()
