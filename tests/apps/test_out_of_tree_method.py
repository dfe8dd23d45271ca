"""A method in a package of its own (``tests/toy_method``), installed as a user would install
it: found through its entry point, with no registration anywhere, by ``flwr run`` (through
``fedrec run``), by tuning and by the audit, and held by the package's own tests to the
conformance suite that :mod:`fedrec_lab.testing` ships.

The package goes into a folder of its own (``pip install --target``) that only the processes
started here see (``PYTHONPATH``), never into this environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TOY = Path(__file__).resolve().parents[1] / "toy_method"
PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy package installed into a folder of its own (its build backend, hatchling,
    is in the ``test`` extra)."""
    target = tmp_path_factory.mktemp("site")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(target), str(TOY)], check=True)
    return target


def with_site(site: Path, tmp_path: Path) -> dict[str, str]:
    """This environment, the toy's folder first on the path and a cache of the test's own."""
    path = os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PYTHONPATH": path, "FEDREC_CACHE_DIR": str(tmp_path / "cache")}


def test_flwr_run_trains_the_installed_method(site: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    overrides = {
        "method": "'toy'",
        "dataset": "'synthetic'",
        "synthetic-users": 40,
        "synthetic-items": 300,
        "synthetic-mean-degree": 10,
        "num-server-rounds": 2,
        "results-dir": f"'{results}'",
        "run-name": "'toy'",
    }
    command = [sys.executable, "-m", "fedrec_lab.launch", "--nodes", "2"]
    command += [f"{key}={value}" for key, value in overrides.items()]
    done = subprocess.run(
        command,
        cwd=PROJECT,
        env=with_site(site, tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((results / "toy" / "summary.json").read_text())
    assert summary["method"] == "toy" and summary["rounds"] == 2, summary
    config = json.loads((results / "toy" / "config.json").read_text())
    assert config["toy-temperature"] == 1.0 and config["toy-bias"] is True  # its own keys
    assert summary["test"]["hr@10"] > 0, summary


def test_tuning_and_the_audit_list_the_installed_method(site: Path, tmp_path: Path) -> None:
    script = (
        "from fedrec_lab.audit.run import auditable_methods\n"
        "from fedrec_lab.tuning import space_for\n"
        "print(auditable_methods()[-1], ' '.join(space_for({'method': 'toy'})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=with_site(site, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["toy", "lr", "item-lr", "toy-temperature"]


def test_the_packages_own_tests_pass_the_conformance_suite(site: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-c", str(TOY / "pyproject.toml"), "--rootdir", str(TOY)]
    command += ["--basetemp", str(tmp_path / "basetemp"), str(TOY / "tests")]
    done = subprocess.run(
        command, cwd=tmp_path, env=with_site(site, tmp_path), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("8 passed"), done.stdout
