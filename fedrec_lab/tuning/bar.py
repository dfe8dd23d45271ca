"""A study's progress bar (tqdm): over the time limit when there is one, else over the
trials; shown only when stderr is a terminal. Each finished trial also gets a line."""

from __future__ import annotations

import sys
import threading
import time

from tqdm import tqdm


class StudyBar:
    """Progress of a study: ``tick`` as time passes, ``finished`` once per trial."""

    def __init__(self, trials: int | None, finished: int, limit_s: float | None) -> None:
        self.started = time.monotonic()
        self.limit_s = limit_s
        self.lock = threading.Lock()
        disable = not sys.stderr.isatty()
        if limit_s is not None:
            self.bar = tqdm(
                total=max(1, round(limit_s)),
                unit="s",
                desc="tune (time budget)",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}",
                disable=disable,
            )
        else:
            self.bar = tqdm(
                total=trials, initial=finished, unit="trial", desc="tune", disable=disable
            )

    def tick(self) -> None:
        """Move a time bar to the seconds spent."""
        if self.limit_s is None:
            return
        with self.lock:
            self.bar.n = min(self.bar.total, round(time.monotonic() - self.started))
            self.bar.refresh()

    def finished(self, line: str, best: float | None, pruned: int) -> None:
        """A trial ended: its line above the bar, the bar moved on."""
        with self.lock:
            self.bar.write(line, file=sys.stderr if not self.bar.disable else sys.stdout)
            if best is not None:
                self.bar.set_postfix_str(f"best val HR@10 {100 * best:.2f}, pruned {pruned}")
            if self.limit_s is None:
                self.bar.update(1)
        self.tick()

    def close(self) -> None:
        self.bar.close()
