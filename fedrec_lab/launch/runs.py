"""One run through ``flwr run`` on a private SuperLink, reported as its run folder says.

The SuperLink may die during a run (killed, crashed, out of memory): the log stream ends
with it, while a simulation goes on without it and writes its rounds. The launch then says
so (which process, its PID, when, where its log is kept), waits for the run's own process,
and reports what the run folder holds (:mod:`fedrec_lab.launch.run_folder`): a completed
run is completed, with a warning; an unfinished one gets the ``fedrec --resume`` command.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fedrec_lab import processes
from fedrec_lab.launch import run_folder
from fedrec_lab.launch.flwr_cli import follow, stop_run, stop_run_processes, submit
from fedrec_lab.launch.ray_cluster import LOCAL_RAY, resolve_ray_address
from fedrec_lab.launch.run_config import check_data, check_run_config, with_absolute_paths
from fedrec_lab.launch.superlink import RUN_ROLES, LocalSuperLink, local_superlink
from fedrec_lab.launch.tools import Say, quiet
from fedrec_lab.project import project_root

COMPLETED = "finished:completed"
#: A run that ran its rounds but some changed nothing shared (summary.json's void_rounds).
COMPLETED_VOID = "finished:completed-with-void-rounds"
#: The status when the SuperLink died and the run folder shows no completed run.
SUPERLINK_DIED = "unknown:superlink-died"
#: Without a SuperLink, the run's process is stopped once its rounds.csv stood still this long.
STALL_SECONDS = 900.0
PROGRESS_EVERY = 30.0  # seconds between progress lines while the run goes on alone
#: What a launch does before the first round, one step of its progress bar each.
STEPS = (
    "preparing the data",
    "starting the SuperLink",
    "submitting the run (flwr run)",
    "starting the simulation",
)


class RunInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM: the run was stopped with ``flwr stop`` and our processes ended."""

    def __init__(self, signum: int, run_id: str | None = None, status: str = "") -> None:
        super().__init__(signum, run_id, status)
        self.signum, self.run_id, self.status = signum, run_id, status


@dataclass(frozen=True)
class Outcome:
    """How a launch ended: the run's status, the log (when collected) and its folder."""

    status: str
    output: str = ""
    folder: Path | None = None


def run(
    config: dict[str, Any],
    nodes: int = 2,
    federation: Sequence[str] = (),
    project: Path | None = None,
    stream: bool = True,
    timeout: float | None = None,
    say: Say = quiet,
    check: bool = True,
    ray_address: str | None = None,
) -> tuple[str, str]:
    """``flwr run`` the app with ``config`` on ``nodes`` SuperNodes; (status, output).

    ``status`` is the run's final status, e.g. ``finished:completed``, as its run folder
    confirms it (:func:`launch`). Relative ``results-dir``/``data-dir`` are made absolute
    against the current folder. Raises :class:`ConfigError` before starting anything if
    Flower or the ServerApp would refuse ``config``; on KeyboardInterrupt stops the run and
    raises :class:`RunInterrupted`; past ``timeout`` seconds stops the run and returns
    ``timeout (<status>)``. ``check=False`` skips the check (another app than this
    project's, e.g. ``bench/echo_app``). ``ray_address`` (``HOST:PORT``) runs the
    ClientApps on that Ray cluster, None on a new local Ray instance.
    """
    outcome = launch(config, nodes, federation, project, stream, timeout, say, check, ray_address)
    return outcome.status, outcome.output


def launch(
    config: dict[str, Any],
    nodes: int = 2,
    federation: Sequence[str] = (),
    project: Path | None = None,
    stream: bool = True,
    timeout: float | None = None,
    say: Say = quiet,
    check: bool = True,
    ray_address: str | None = None,
    prepare: bool = False,
    steps: tqdm | None = None,
) -> Outcome:
    """:func:`run`, returning the :class:`Outcome` (its run folder included).

    ``prepare``: split the dataset into the cache here first, if it is not there yet (on a
    new local Ray instance only: a cluster's workers have their own caches), downloading it
    if needed: data that cannot be had is refused (:class:`ConfigError`) before anything
    starts, as a bad configuration is. ``steps``: a
    progress bar (:func:`fedrec_lab.progress.bar`) of :data:`STEPS`, closed once the log
    shows the first finished round.
    """
    steps = tqdm(disable=True) if steps is None else steps
    config = with_absolute_paths(config)
    config.setdefault("results-dir", str(Path("results").resolve()))
    app = Path(project).resolve() if project is not None else project_root()
    ray = resolve_ray_address(ray_address, federation)
    if check:
        card = check_run_config(config, app, data=not (prepare and ray == LOCAL_RAY))
        step(steps, 0)
        if prepare and ray == LOCAL_RAY:
            card = check_data(config, app)
        for line in card:
            say(line)
    if ray != LOCAL_RAY:
        say(f"Ray: the ClientApps run on the cluster at {ray}")
    step(steps, 1)
    results = Path(config["results-dir"])
    before = run_folder.run_folders(results)

    def folder() -> Path | None:
        return run_folder.locate(config, before)

    deadline = None if timeout is None else time.monotonic() + timeout
    with local_superlink(say=say, ray=ray) as link:
        run_id = None
        try:
            step(steps, 2)
            run_id, said = submit(link, config, nodes, federation, app)
            if run_id is None:
                say(f"the run did not start: {said}")
                report_exits(link, say, results)
                return Outcome("not-started", said)
            say(f"run {run_id} submitted")
            step(steps, 3)
            status, output = follow(link, run_id, stream, timeout, steps.close)
            steps.close()
            announced = status is None
            if announced:
                status = outlive_superlink(link, folder, deadline, say)
            return conclude(link, status, output, folder(), say, results, announced)
        except KeyboardInterrupt as interrupt:
            signum = getattr(interrupt, "signum", signal.SIGINT)
            if run_id:
                say(f"{signal.Signals(signum).name}: stopping run {run_id} (flwr stop)")
            status = stop_run(link, run_id) if run_id else "not-started"
            raise RunInterrupted(signum, run_id, status) from None


def step(steps: tqdm, index: int) -> None:
    """The bar at step ``index`` of :data:`STEPS` (those before it done)."""
    steps.update(index - steps.n)
    steps.set_postfix_str(STEPS[index])


def outlive_superlink(
    link: LocalSuperLink,
    find_folder: Callable[[], Path | None],
    deadline: float | None,
    say: Say,
) -> str | None:
    """The SuperLink ended during the run: wait for the run's own process, which may go on
    without it (a simulation does), and say how far it gets. Its status: None when it ended
    by itself (the run folder tells the rest), else why it was stopped."""
    link.watch()  # the run's process, if the SuperLink ended before it was seen
    died = link.died
    say(
        f"{died.describe() if died else 'the SuperLink ended'}, before the run's end: Flower "
        "can no longer report on the run, and its log stream ended with it"
    )
    waiting = link.running(*RUN_ROLES)
    if not waiting:
        return None
    pids = ", ".join(str(p[0]) for p in waiting)
    say(f"the run's process (PID {pids}) goes on without it: waiting for it to end")
    last_rounds, last_change, last_said = -1, time.monotonic(), 0.0
    while any(processes.alive(p) for p in waiting):
        now = time.monotonic()
        folder = find_folder()
        rounds = run_folder.rounds_written(folder)
        if rounds != last_rounds:
            last_rounds, last_change = rounds, now
            if folder is not None and now - last_said >= PROGRESS_EVERY:
                say(f"{rounds} rounds in {folder / 'rounds.csv'}")
                last_said = now
        if deadline is not None and now > deadline:
            return f"timeout ({stop_run_processes(link)})"
        if now - last_change > STALL_SECONDS:
            say(f"no new round for {STALL_SECONDS:.0f} s: stopping the run's process")
            return stop_run_processes(link)
        time.sleep(1.0)
    return None


def conclude(
    link: LocalSuperLink,
    status: str | None,
    output: str,
    folder: Path | None,
    say: Say,
    spare: Path,
    announced: bool = False,
) -> Outcome:
    """The outcome as the run folder says it, with Flower's ``status`` (None: unknown, the
    SuperLink ended) read against it. A dead SuperLink's log is kept in the run folder (or
    ``spare`` without one); ``announced``: its end was said already."""
    verdict = run_folder.judge(folder)
    report_exits(link, say, verdict.folder or spare, announced)
    if verdict.state == run_folder.COMPLETED:
        if status != COMPLETED:
            flower = f"Flower reported {status}" if status else "Flower could not tell"
            say(f"warning: {flower}, but the run completed: {verdict.describe()}")
        if verdict.void_rounds:
            say(f"warning: the run is not a plain completed one: {verdict.describe()}")
            return Outcome(COMPLETED_VOID, output, verdict.folder)
        if verdict.partial_rounds:
            say(f"warning: some rounds left a node's reply out: {verdict.describe()}")
        return Outcome(COMPLETED, output, verdict.folder)
    if verdict.state == run_folder.UNFINISHED:
        say(f"the run did not finish: {verdict.describe()}")
        if verdict.resumable:
            say(resume_advice(verdict))
        if status in (None, COMPLETED):
            status = SUPERLINK_DIED if status is None else "unfinished"
        return Outcome(status, output, verdict.folder)
    return Outcome(status or SUPERLINK_DIED, output, None)


def resume_advice(verdict: run_folder.Verdict) -> str:
    """What to do about an unfinished run: resume it, unless it ran no round (nothing to
    continue: the same command starts it again)."""
    if verdict.rounds == 0:
        return "it stopped before its first round: fix the cause and run the same command again"
    return f"continue it, once the cause is fixed, with: fedrec run --resume {verdict.folder}"


def report_exits(link: LocalSuperLink, say: Say, folder: Path, announced: bool = False) -> None:
    """Say which of our processes ended before their time, and keep a dead SuperLink's log
    in ``folder`` (its ``FLWR_HOME`` is removed on exit)."""
    link.watch()
    died = link.died
    for ended in link.exits:
        if ended.role == "SuperExec" or (died and ended.role != "SuperLink"):
            say(ended.describe())
    if died is None:
        return
    if not announced:
        say(f"{died.describe()}, before the run's end")
    kept = keep_log(link, folder)
    say(f"the SuperLink's log is kept in {kept}" if kept else f"no SuperLink log ({link.log_file})")


def keep_log(link: LocalSuperLink, folder: Path) -> Path | None:
    """Copy the SuperLink's log into ``folder``; the copy, None if there was no log."""
    if not link.log_file.is_file():
        return None
    folder.mkdir(parents=True, exist_ok=True)
    kept = folder / f"superlink-{link.process.pid}.log"
    shutil.copyfile(link.log_file, kept)
    return kept
