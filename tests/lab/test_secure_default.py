"""``fedrec deploy-local`` is secure unless told otherwise: TLS and SuperNode authentication by
default, ``--insecure`` warns. The fast tests stop at ``deploy_local`` (nothing starts); the
slow one runs a real secure deployment with no flag."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fedrec_lab import deploy

PROJECT = Path(__file__).resolve().parents[2]
SYNTHETIC = [
    "dataset='synthetic'",
    "synthetic-users=30",
    "synthetic-items=200",
    "synthetic-mean-degree=8",
]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    """The arguments ``deploy.main`` hands to ``deploy_local`` (which starts nothing here)."""
    seen: list[dict[str, Any]] = []

    def fake_deploy_local(num_nodes, config, folder, secure, timeout, project=None):
        seen.append({"nodes": num_nodes, "secure": secure})
        return deploy.COMPLETED, tmp_path / "no-run"

    monkeypatch.setattr(deploy, "deploy_local", fake_deploy_local)
    return seen


def run_main(tmp_path: Path, *flags: str) -> int:
    argv = ["2", *SYNTHETIC, "--keep", str(tmp_path / "work"), "--project", str(PROJECT)]
    return deploy.main([*argv, *flags])


def test_secure_is_the_default(calls, tmp_path, capsys) -> None:
    assert run_main(tmp_path) == 0
    assert calls == [{"nodes": 2, "secure": True}]
    assert "WARNING" not in capsys.readouterr().err


def test_deploy_local_is_secure_when_called_without_secure() -> None:
    assert inspect.signature(deploy.deploy_local).parameters["secure"].default is True


def test_insecure_prints_a_warning(calls, tmp_path, capsys) -> None:
    assert run_main(tmp_path, "--insecure") == 0
    assert calls == [{"nodes": 2, "secure": False}]
    err = capsys.readouterr().err
    assert "fedrec: WARNING: --insecure" in err
    assert "without TLS" in err and "accepts any SuperNode" in err


def test_secure_flag_is_still_accepted(calls, tmp_path, capsys) -> None:
    assert run_main(tmp_path, "--secure") == 0
    assert calls == [{"nodes": 2, "secure": True}]
    assert "WARNING" not in capsys.readouterr().err


def test_secure_and_insecure_together_are_refused(calls, tmp_path, capsys) -> None:
    assert run_main(tmp_path, "--secure", "--insecure") == 2
    assert calls == []
    assert "exclude each other" in capsys.readouterr().err


@pytest.mark.slow
def test_a_deployment_with_no_flag_runs_with_tls_and_authentication(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "fedrec_lab.deploy", "--project", str(PROJECT), "1"]
    command += [*SYNTHETIC, "num-server-rounds=1", f"results-dir='{tmp_path / 'results'}'"]
    done = subprocess.run(
        [*command, "--keep", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(TLS, CA " in done.stderr and "SuperNode authentication)" in done.stderr
    assert "WARNING" not in done.stderr
    assert (tmp_path / "work" / "tls" / "ca.crt").exists()
