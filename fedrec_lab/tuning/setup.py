"""``fedrec tune``'s command line: what a study tunes (a method on a dataset, or a preset,
with ``key=value`` settings), its fixed keys, its budget, its sampler and pruner."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrec_flwr.schema import Dim
from fedrec_lab.project import ProjectNotFoundError, project_root
from fedrec_lab.scratch import HelpFormatter, add_data_dir, add_out

DESCRIPTION = """Hyperparameter tuning on validation HR@10 with Optuna (TPE),
through the same ServerApp and ClientApp as ``flwr run`` (an in-process grid of one node, a
fresh process per trial), pruned round by round, within a budget of trials or wall time.

    fedrec tune --method fedmf --dataset lastfm-2k --protocol strict --budget 2h --out DIR
    fedrec tune --method pfedrec --dataset file data-file=logs/clicks.csv user-column=visitor
    fedrec tune conf/pfedrec-ml100k-strict.toml --trials 20 --rounds 60 --patience 10"""
#: Trials of a study bounded by time alone (none given): as many as the time allows.
UNBOUNDED = 1_000_000


def seconds(text: str) -> float:
    """A duration: ``2h``, ``90m``, ``1h30m``, ``45s`` or plain seconds (``3600``)."""
    parts = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?", text)
    if not text or parts is None or not any(parts.groups()):
        raise argparse.ArgumentTypeError(f"'{text}' is no duration: write e.g. 2h, 90m, 1h30m, 600")
    hours, minutes, secs = (float(part or 0) for part in parts.groups())
    return 3600 * hours + 60 * minutes + secs


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument(
        "setting",
        nargs="*",
        help="a preset (conf/<preset>.toml) and/or run-config key=value settings "
        "(data-file=..., user-column=...); a key of the search space set here is held at "
        "that value, not tuned",
    )
    parser.add_argument("--method", help="the method to tune (its reference defaults first)")
    parser.add_argument("--dataset", help="ml-100k, lastfm-2k, synthetic, file, ...")
    parser.add_argument("--protocol", help="strict or paper (default: strict without a preset)")
    add_data_dir(parser)
    parser.add_argument(
        "--trials",
        type=int,
        default=None,
        help="finished trials (complete or pruned) in all (default: 20, or as many as the "
        "time allows with --budget or --timeout)",
    )
    parser.add_argument(
        "--budget", type=seconds, help="wall time of the study in all, its earlier runs "
        "included (2h, 90m, 1h30m, 600); a trial running at its end is stopped (pruned)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds this run may take (as --budget)"
    )
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--patience", type=int, default=10, help="early-stopping-patience")
    parser.add_argument(
        "--pruner", choices=("median", "hyperband", "none"), default="median",
        help="Optuna's pruner on each round's best validation HR@10 so far",
    )  # fmt: skip
    parser.add_argument(
        "--prune-warmup", type=int, default=None,
        help="rounds before a trial may be pruned (default: max(5, rounds / 10))",
    )  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1, help="trials at a time")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampler")
    parser.add_argument("--device", default="cpu", help="device of every trial (cpu, cuda)")
    add_out(parser, "tune", "the study's journal, its .md/.json report and its tuned preset")
    parser.add_argument(
        "--write-preset", action="store_true", help="copy the best setting into the preset"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the settings and the data (a user's file read and split, a named dataset "
        "found or downloaded), print the dataset card and exit, running no trial",
    )
    parser.add_argument(
        "--plugin-only",
        action="store_true",
        help="tune only the plug-ins' knobs (PLGC, SAM), the method's keys as in the preset",
    )
    return parser


@dataclass
class Setup:
    """A study as the command line sets it up."""

    args: argparse.Namespace
    preset: Path | None
    config: dict[str, Any]  # the start: preset or method, settings, reference defaults
    trial_config: dict[str, Any]  # the same, a relative data-file made absolute
    space: dict[str, Dim]
    fixed: dict[str, Any]
    name: str
    command: str

    @property
    def fixed_shown(self) -> dict[str, Any]:
        return {k: v for k, v in self.fixed.items() if k != "data-dir"}

    @property
    def trials(self) -> int:
        if self.args.trials is not None:
            return self.args.trials
        timed = self.args.budget is not None or self.args.timeout is not None
        return UNBOUNDED if timed else 20

    @property
    def prune(self) -> bool:
        return self.args.pruner != "none"

    def warmup(self) -> int:
        given = self.args.prune_warmup
        return given if given is not None else max(5, self.args.rounds // 10)

    def shared(self) -> dict[str, Any]:
        """What every trial of the study shares: the start less the tuned keys, the fixed
        keys less the data folder and the device (a study may go on on a GPU), and the
        space. A resumed study must share it too."""
        start = {k: v for k, v in self.config.items() if k not in self.space}
        fixed = {k: v for k, v in self.fixed.items() if k not in ("data-dir", "device")}
        space = {k: d.describe() for k, d in self.space.items()}
        return json.loads(json.dumps({"start": start, "fixed": fixed, "space": space}))

    def check_resumable(self, study) -> None:
        """Record what the trials share in a new study; refuse to add trials to a study
        started with other settings (its report would mix the two)."""
        shared, before = self.shared(), study.user_attrs.get("shared")
        if before is None:
            if not study.trials:
                study.set_user_attr("shared", shared)
            return

        def keys(record: dict[str, Any]) -> dict[str, str]:
            held = {k: repr(v) for part in ("start", "fixed") for k, v in record[part].items()}
            return {**held, **{k: f"tuned over {d}" for k, d in record["space"].items()}}

        was, now = keys(before), keys(shared)
        changed = [
            f"{key} was {was.get(key, 'unset')}, now {now.get(key, 'unset')}"
            for key in sorted(set(was) | set(now))
            if was.get(key) != now.get(key)
        ]
        if changed:
            raise SystemExit(
                f"fedrec tune: the study {self.name} in {self.args.out} was started with other "
                f"settings ({'; '.join(changed)}): resume it with the same ones, or pass "
                "another --out for a new study"
            )

    def limit_s(self, spent: float) -> float | None:
        """Seconds this run may take: the budget's rest, and at most ``--timeout``."""
        limits = [self.args.timeout] if self.args.timeout is not None else []
        if self.args.budget is not None:
            limits.append(max(0.0, self.args.budget - spent))
        return min(limits) if limits else None

    def budget_record(self, used_s: float, invocations: int) -> dict[str, Any]:
        args = self.args
        limit = []
        if args.budget is not None:
            limit.append(f"{args.budget / 60:g} min of wall time in all")
        if args.timeout is not None:
            limit.append(f"{args.timeout / 60:g} min for the last run of the command")
        limit.append(f"{self.trials} trials" if self.trials < UNBOUNDED else "no trial limit")
        return {"limit": ", ".join(limit), "used_s": round(used_s, 1), "invocations": invocations}

    def study(self):
        import optuna
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        self.args.out.mkdir(parents=True, exist_ok=True)
        journal = JournalFileBackend(str(self.args.out / f"{self.name}.journal"))
        startup = max(4, self.trials // 3) if self.args.trials is not None else 8
        pruner = {
            "median": lambda: optuna.pruners.MedianPruner(
                n_startup_trials=4, n_warmup_steps=self.warmup()
            ),
            "hyperband": lambda: optuna.pruners.HyperbandPruner(
                min_resource=self.warmup(), max_resource=self.args.rounds
            ),
            "none": optuna.pruners.NopPruner,
        }[self.args.pruner]()
        return optuna.create_study(
            study_name=self.name,
            storage=JournalStorage(journal),
            direction="maximize",
            load_if_exists=True,
            sampler=optuna.samplers.TPESampler(
                seed=self.args.seed, n_startup_trials=min(startup, 100), constant_liar=True
            ),
            pruner=pruner,
        )

    def write_tuned(self, best: dict[str, Any]) -> Path:
        """``<out>/<name>-tuned.toml``: the start with the best trial's values, rounds and
        early stopping as in the study (so that it reruns the trial)."""
        from fedrec_lab.tuning.report import write_tuned_preset

        config = {
            **self.config,
            **best["params"],
            "num-server-rounds": self.args.rounds,
            "early-stopping-patience": self.args.patience,
        }
        first = {key: config.pop(key) for key in ("method", "dataset", "protocol") if key in config}
        path = self.args.out / f"{self.name}-tuned.toml"
        shown = path if not path.is_absolute() else path.name
        test = best.get("test_hr@10")
        header = [
            f"Tuned by `fedrec tune` on validation HR@10 (seed 0): study {self.name}.md beside "
            f"this file, its trial {best['trial']}:",
            f"validation HR@10 {100 * best['val_hr@10']:.2f}, test HR@10 "
            + (f"{100 * test:.2f}" if test is not None else "-")
            + f" (round {best.get('best_round')}).",
            self.command,
            f"fedrec run {shown}",
        ]
        return write_tuned_preset(path, {**first, **config}, header)


def parse_settings(items: list[str], parser: argparse.ArgumentParser):
    """The preset (a ``.toml``) and the ``key=value`` settings of the command line."""
    presets = [Path(item) for item in items if item.endswith(".toml")]
    settings = [item for item in items if not item.endswith(".toml")]
    if len(presets) > 1:
        parser.error(f"one preset at most, not {len(presets)}: {', '.join(map(str, presets))}")
    for item in settings:
        if "=" not in item:
            parser.error(f"'{item}' is neither a preset (.toml) nor a key=value setting")
    preset = presets[0] if presets else None
    if preset is not None and not preset.is_file():
        parser.error(f"no preset {preset}: pass a conf/<preset>.toml file")
    return preset, settings


def held_out_of(space: dict[str, Dim], settings: list[str]) -> dict[str, Dim]:
    """The space less the keys a ``key=value`` setting holds: fewer free keys, each held at
    the value given in every trial."""
    held = {item.split("=", 1)[0].strip() for item in settings}
    free = {key: dim for key, dim in space.items() if key not in held}
    if not free:
        raise ValueError(
            f"every key of the search space ({', '.join(space)}) is held by a key=value "
            "setting: leave at least one of them out to tune it"
        )
    return free


def command_line(args, preset: Path | None, settings: list[str]) -> str:
    """The study's command as its report shows it (the data folder as DIR)."""
    target = [f"conf/{preset.name}"] if preset is not None else []
    for key in ("method", "dataset", "protocol"):
        if getattr(args, key):
            target.append(f"--{key} {getattr(args, key)}")
    parts = [*target, *settings, "--data-dir DIR"]
    if args.trials is not None:
        parts.append(f"--trials {args.trials}")
    if args.budget is not None:
        parts.append(f"--budget {args.budget:g}s")
    parts.append(f"--rounds {args.rounds} --patience {args.patience} --seed {args.seed}")
    if args.pruner != "median" or args.prune_warmup is not None:
        parts.append(f"--pruner {args.pruner}")
        if args.prune_warmup is not None:
            parts.append(f"--prune-warmup {args.prune_warmup}")
    if args.jobs != 1:
        parts.append(f"--jobs {args.jobs}")
    if args.device != "cpu":
        parts.append(f"--device {args.device}")
    if args.plugin_only:
        parts.append("--plugin-only")
    if args.timeout is not None:
        parts.append(f"--timeout {args.timeout:g}")
    return "fedrec tune " + " ".join(parts)


def study_name(preset: Path | None, config: dict[str, Any]) -> str:
    """The preset's stem, else ``<method>-<dataset>-<protocol>`` (a file: ``file-<stem>``)."""
    if preset is not None:
        return preset.stem
    dataset = str(config.get("dataset"))
    if dataset == "file":
        dataset = f"file-{Path(str(config.get('data-file'))).stem}"
    return f"{config['method']}-{dataset}-{config.get('protocol', 'strict')}"


def parse(argv: list[str] | None = None) -> Setup:
    from fedrec_flwr.config import RunConfig
    from fedrec_flwr.data.prepared import check_prepared
    from fedrec_flwr.data.user_dataset import FILE_DATASET
    from fedrec_lab.launch.run_config import merged_run_config
    from fedrec_lab.tuning.space import space_for

    cli = parser()
    args = cli.parse_intermixed_args(argv)  # settings may stand among the options
    try:  # every trial runs from the checkout: without one, no trial could start
        project_root()
    except ProjectNotFoundError as error:
        cli.error(str(error))
    preset, settings = parse_settings(args.setting, cli)
    if preset is None and not (args.method and args.dataset):
        cli.error("name what to tune: --method M --dataset D (or a preset .toml)")
    options = [
        f"{key}={json.dumps(getattr(args, key))}"
        for key in ("method", "dataset", "protocol")
        if getattr(args, key)
    ]
    if preset is None and not args.protocol:
        options.append('protocol="strict"')
    try:
        config = merged_run_config(preset, [*options, *settings])
    except ValueError as error:  # ConfigError: a setting not key=value, or not of its type
        cli.error(str(error))
    trial_config = dict(config)
    if config.get("data-file") and not Path(config["data-file"]).is_absolute():
        trial_config["data-file"] = str(Path(config["data-file"]).resolve())  # trials run elsewhere
    fixed = {
        "seed": 0,
        "num-server-rounds": args.rounds,
        "early-stopping-patience": args.patience,
        "checkpoint-every": 0,
        **({"device": args.device} if args.device != "cpu" else {}),
        **({"data-dir": str(Path(args.data_dir).resolve())} if args.data_dir else {}),
    }
    try:  # refused here as the trials would refuse it; the data found (or downloaded) and
        # split once, a user's file read and checked
        checked = RunConfig.from_mapping({**trial_config, **fixed})
        space = held_out_of(space_for(trial_config, plugin_only=args.plugin_only), settings)
        card = check_prepared(checked) if args.check or checked.data.dataset == FILE_DATASET else []
    except (ValueError, OSError) as error:
        cli.error(str(error))
    for line in card:
        print(line, file=sys.stderr)
    name = study_name(preset, config)
    return Setup(args, preset, config, trial_config, space, fixed, name,
                 command_line(args, preset, settings))  # fmt: skip
