"""Progress bars (:mod:`fedrec_lab.progress`): on a terminal's standard error only, off with
``--no-progress`` or ``FEDREC_PROGRESS=0``, never in a result file; and the warnings that
every ``fedrec run`` printed (Flower's default-SuperNodes line, Ray's accelerator tip) gone."""

from __future__ import annotations

import importlib.util
import io
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from fedrec_lab import progress
from fedrec_lab.baselines import command as baselines_command
from fedrec_lab.baselines import rows as baselines_rows
from fedrec_lab.experiments.command import _command
from fedrec_lab.launch import flwr_cli, superlink


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_bar_on_a_terminal_shows_its_total_and_its_count() -> None:
    terminal = Terminal()
    with progress.bar(3, "cells", unit="cell", stream=terminal) as bar:
        for _ in range(3):
            bar.update()
    drawn = terminal.getvalue()
    assert "cells" in drawn and "0/3" in drawn and "3/3" in drawn
    assert "cell/s" in drawn or "s/cell" in drawn  # the rate, from which the ETA comes


@pytest.mark.parametrize("how", ["switch", "environment", "not a terminal"])
def test_no_bar_when_switched_off_or_not_on_a_terminal(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = io.StringIO() if how == "not a terminal" else Terminal()
    if how == "environment":
        monkeypatch.setenv(progress.ENVIRONMENT, "0")
    with progress.bar(3, "cells", enabled=how != "switch", stream=stream) as bar:
        bar.set_postfix_str("a cell")
        bar.update(3)
    assert stream.getvalue() == ""


def test_the_switch_is_documented_and_left_out_of_recorded_commands() -> None:
    parser = __import__("argparse").ArgumentParser()
    progress.add_switch(parser)
    assert parser.parse_args([]).progress is True
    assert parser.parse_args(["--no-progress"]).progress is False
    assert "FEDREC_PROGRESS=0" in parser.format_help()
    shown = _command(["strict", "--no-progress", "--seeds", "0"])
    assert shown == "python -m fedrec_lab.experiments strict --seeds 0"


def test_what_is_printed_while_the_bar_shows_comes_out_whole_above_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    handler = logging.StreamHandler(terminal)
    handler.setFormatter(logging.Formatter("LOG %(message)s"))
    logger = logging.getLogger("flwr")
    monkeypatch.setattr(logger, "handlers", [handler])
    with progress.bar(2, "runs", unit="run") as bar:
        print("first line", file=sys.stderr)
        logger.warning("a record")
        bar.update(2)
        print("unfinished", end="", file=sys.stderr)
    assert sys.stderr is terminal and handler.stream is terminal  # given back
    lines = [part for part in terminal.getvalue().split("\r") if part.strip()]
    written = [line for line in lines if "runs" not in line]
    assert written == ["first line\n", "LOG a record\n", "unfinished"]


def test_results_are_byte_identical_with_and_without_the_bar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(baselines_rows, "time", SimpleNamespace(perf_counter=lambda: 0.0))
    outputs = {}
    for name, switch in (("bar", []), ("switch", ["--no-progress"]), ("plain", [])):
        terminal = io.StringIO() if name == "plain" else Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        out = tmp_path / name
        argv = ["--dataset", "synthetic", "--rows", "popularity", "--out", str(out), *switch]
        baselines_command.main(argv)
        printed = capsys.readouterr().out.replace(str(out), "OUT")
        files = {p.name: p.read_bytes().replace(str(out).encode(), b"OUT") for p in out.iterdir()}
        outputs[name] = (printed, files, terminal.getvalue())
    assert "1/1" in outputs["bar"][2] and "baselines" in outputs["bar"][2]
    assert "1/1" not in outputs["switch"][2] and "1/1" not in outputs["plain"][2]
    assert sorted(outputs["bar"][1]) == [
        "baselines-synthetic-1000x2000-d50-strict.json",
        "baselines-synthetic-1000x2000-d50-strict.md",
    ]
    assert outputs["bar"][:2] == outputs["switch"][:2] == outputs["plain"][:2]


# --- the warnings of every run ---------------------------------------------------------------


def source_of(package: str, *path: str) -> str:
    """The text of a file of an installed ``package`` (not imported)."""
    return Path(importlib.util.find_spec(package).origin).parent.joinpath(*path).read_text()


def test_flowers_default_supernodes_warning_is_left_out_of_the_log() -> None:
    (left_out,) = flwr_cli.LEFT_OUT
    assert left_out in source_of("flwr", "simulation", "app.py")  # still what Flower logs
    warning = f"\x1b[93mWARNING \x1b[0m:   Since flwr 1.32, {left_out}\n"
    log = [
        "\x1b[92mINFO \x1b[0m:      Starting Flower Simulation\n",
        warning,
        "\x1b[92mINFO \x1b[0m:      Federation `@none/default` (2 simulated SuperNodes)\n",
        "\x1b[92mINFO \x1b[0m:      [round 1/2] 0.9s | train-loss 0.6598\n",
        "\x1b[92mINFO \x1b[0m:      [round 2/2] 0.9s | train-loss 0.3649\n",
    ]
    collected: list[str] = []
    seen: list[int] = []
    flwr_cli.pump(iter(log), False, collected, lambda: seen.append(len(collected)))
    assert collected == [line for line in log if line != warning]
    assert seen == [3]  # once, at the first finished round


def test_rays_accelerator_tip_is_filtered_in_flowers_processes_and_nothing_else() -> None:
    worker = source_of("ray", "_private", "worker.py")
    tip = "Tip: In future versions of Ray, Ray will no longer override accelerator"
    assert tip in worker and "FutureWarning" in worker  # still what Ray warns
    env = superlink.superlink_env(Path("home"), 1, 2, "local")
    script = (
        "import warnings\n"
        f"warnings.warn_explicit({tip!r}, FutureWarning, 'worker.py', 1,"
        " module='ray._private.worker')\n"
        f"warnings.warn_explicit({tip!r}, FutureWarning, 'other.py', 1, module='other')\n"
        "warnings.warn_explicit('Other', FutureWarning, 'worker.py', 2,"
        " module='ray._private.worker')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONWARNINGS": env["PYTHONWARNINGS"]},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "worker.py:1:" not in done.stderr  # the tip from Ray's worker: filtered
    assert "other.py:1:" in done.stderr and "worker.py:2:" in done.stderr  # others: shown
