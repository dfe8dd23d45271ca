"""What the lab commands share on their command line: where they write without ``--out``, and
a help text that shows every default.

Without ``--out`` a command writes into a scratch folder under the current one,
``./fedrec-out/<command>``, never into the committed results: regenerating
``bench/results`` takes an explicit ``--out bench/results/...``.
"""

from __future__ import annotations

import argparse
import copy
from argparse import SUPPRESS
from pathlib import Path

#: The scratch folder, relative to the current folder (ignored by git in the checkout).
SCRATCH = Path("fedrec-out")


def scratch_out(command: str) -> Path:
    """The default ``--out`` of lab command ``command``: ``fedrec-out/<command>``."""
    return SCRATCH / command


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """``--help`` with every option's default (those without a help text too, an empty
    string as ``''``; a help text that states its default keeps it), and the description's
    lines as written."""

    def _format_action(self, action: argparse.Action) -> str:
        if action.help is None and action.option_strings and action.default is not SUPPRESS:
            action = copy.copy(action)
            action.help = self._get_help_string(action)
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if "(default: " in help_text:  # states its own default
            return help_text
        if "%(default)" in help_text or action.default is SUPPRESS or not action.option_strings:
            return super()._get_help_string(action) or ""
        shown = "%(default)r" if action.default == "" else "%(default)s"
        return f"{help_text} (default: {shown})".strip()


def add_out(parser: argparse.ArgumentParser, command: str, what: str) -> None:
    """``--out``, defaulting to the command's scratch folder; ``what``: what it receives."""
    parser.add_argument(
        "--out",
        type=Path,
        default=scratch_out(command),
        help=f"folder of {what} (bench/results/... only when given explicitly)",
    )


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    """``--data-dir``: the datasets' folder ('' = $FEDREC_DATA_DIR, else the download cache)."""
    parser.add_argument(
        "--data-dir",
        default="",
        help="folder of the dataset files ('': $FEDREC_DATA_DIR, else downloaded to the cache)",
    )


def wrote(out: Path, what: str = "results") -> None:
    """Say where the command's output went (an absolute path)."""
    print(f"{what} written to {Path(out).resolve()}", flush=True)
