"""Progress bars of the lab's long commands: tqdm, on standard error, only on a terminal.

A bar shows when standard error is a terminal, unless the command was given
``--no-progress`` (:func:`add_switch`) or the environment has ``FEDREC_PROGRESS=0``. It
never reaches a result file. While it shows, what the command prints to the terminal (its
standard error, a terminal's standard output, the console handlers of the root and Flower
loggers) goes out line by line above the bar, unchanged, so the bar is not torn::

    with progress.bar(len(jobs), "audit", unit="run", enabled=args.progress) as bar:
        for job in jobs:
            run(job)
            bar.update()

The bar is drawn again every ``tick`` seconds (1 by default), so that its clock runs between
updates. A disabled bar is a tqdm that draws nothing: ``update``, ``set_postfix_str`` and
``close`` still work.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from tqdm import tqdm

ENVIRONMENT = "FEDREC_PROGRESS"
SWITCH = "--no-progress"
OFF = ("0", "false", "no", "off")
#: The loggers whose console handlers write above the bar (the root's and Flower's).
LOGGERS = ("", "flwr")


def is_terminal(stream: object) -> bool:
    """Whether ``stream`` is an open terminal."""
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def wanted(enabled: bool = True, stream: TextIO | None = None) -> bool:
    """Whether a bar shows: ``enabled`` (no ``--no-progress``), ``FEDREC_PROGRESS`` not 0,
    and ``stream`` (default standard error) a terminal."""
    if not enabled or os.environ.get(ENVIRONMENT, "").strip().lower() in OFF:
        return False
    return is_terminal(sys.stderr if stream is None else stream)


def add_switch(parser: argparse.ArgumentParser) -> None:
    """``--no-progress`` (``args.progress``, default True)."""
    parser.add_argument(
        SWITCH,
        dest="progress",
        action="store_false",
        help=f"no progress bar, as {ENVIRONMENT}=0 (default: a bar on standard error when it "
        "is a terminal; it never changes a result file)",
    )


def without_switch(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--no-progress``: a command line as a result file records it (the
    switch changes no result)."""
    return [arg for arg in argv if arg != SWITCH]


class _AboveBar:
    """A text stream that writes each whole line to ``target`` with the bars on ``bar_stream``
    cleared first and drawn again after (:meth:`tqdm.tqdm.external_write_mode`)."""

    def __init__(self, target: TextIO, bar_stream: TextIO) -> None:
        self.target, self.bar_stream, self.pending = target, bar_stream, ""

    def write(self, text: str) -> int:
        self.pending += text
        if "\n" in self.pending:
            lines, _, self.pending = self.pending.rpartition("\n")
            self._out(lines + "\n")
        return len(text)

    def _out(self, text: str) -> None:
        with tqdm.external_write_mode(file=self.bar_stream):
            self.target.write(text)
            self.target.flush()

    def flush(self) -> None:
        """Lines are written as they end; the rest waits for its end (or :meth:`close`)."""

    def close(self) -> None:
        """Write what is left of an unfinished line (the target stays open)."""
        if self.pending:
            text, self.pending = self.pending, ""
            self._out(text)

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno ...
        return getattr(self.target, name)


@contextlib.contextmanager
def _lines_above(bar_stream: TextIO) -> Iterator[None]:
    """Standard error (when it is ``bar_stream``), a terminal's standard output and the
    console handlers on them write their lines above the bar."""
    wrapped: dict[int, _AboveBar] = {}
    saved = sys.stdout, sys.stderr
    if sys.stderr is bar_stream:
        sys.stderr = wrapped.setdefault(id(bar_stream), _AboveBar(bar_stream, bar_stream))
    if is_terminal(sys.stdout) and not isinstance(sys.stdout, _AboveBar):
        sys.stdout = wrapped.setdefault(id(saved[0]), _AboveBar(saved[0], bar_stream))
    handlers = [
        (handler, handler.stream)
        for name in LOGGERS
        for handler in logging.getLogger(name).handlers
        if isinstance(handler, logging.StreamHandler) and id(handler.stream) in wrapped
    ]
    for handler, stream in handlers:
        handler.stream = wrapped[id(stream)]
    try:
        yield
    finally:
        for handler, stream in handlers:
            handler.stream = stream
        sys.stdout, sys.stderr = saved
        for stream in wrapped.values():
            stream.close()


@contextlib.contextmanager
def _ticking(progress: tqdm, every: float) -> Iterator[None]:
    """Draw ``progress`` again every ``every`` seconds (a closed bar draws nothing)."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every):
            progress.refresh()

    ticker = threading.Thread(target=tick, name="progress-tick", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()


@contextlib.contextmanager
def bar(
    total: int | None,
    desc: str,
    unit: str = "it",
    enabled: bool = True,
    stream: TextIO | None = None,
    tick: float = 1.0,
    **options: Any,
) -> Iterator[tqdm]:
    """A tqdm bar of ``total`` steps on ``stream`` (default standard error), drawn only when
    :func:`wanted`, again every ``tick`` seconds; ``options`` go to :class:`tqdm.tqdm`
    (``leave``, ``bar_format`` ...)."""
    stream = sys.stderr if stream is None else stream
    if isinstance(stream, _AboveBar):  # a bar inside another's: drawn on the terminal itself
        stream = stream.target
    if not wanted(enabled, stream):
        with tqdm(total=total, disable=True) as off:
            yield off
        return
    with (
        tqdm(total=total, desc=desc, unit=unit, file=stream, dynamic_ncols=True, **options) as on,
        _lines_above(stream),
        _ticking(on, tick),
    ):
        yield on
