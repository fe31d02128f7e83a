"""``forge doctor``: real probes of this machine's installation."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_doctor_imports_the_stack(cli):
    result = cli("doctor", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    for required in ("python", "torch", "transformers", "vllm", "fastapi", "uvicorn", "sqlite (WAL)"):
        assert checks[required]["ok"] and checks[required]["required"], checks[required]
    assert "build: cpu" in checks["torch"]["detail"] or "build: cuda" in checks["torch"]["detail"]
    assert checks["deepspeed"]["ok"] and checks["ray"]["ok"] and checks["mcp"]["ok"]
    assert checks["postgresql"]["ok"] is None  # not configured
    assert checks["example plugin"]["required"] is False


def test_doctor_quick_table(cli):
    result = cli("doctor", "--quick")
    assert result.exit_code == 0
    for name in ("torch", "vllm", "deepspeed", "ray", "docker engine", "bubblewrap", "postgresql", "example plugin"):
        assert name in result.stdout


def test_doctor_fails_only_for_what_the_default_loop_needs(cli):
    # an unreachable PostgreSQL that the config asks for is needed: exit 1, one red line
    result = cli("--set", "pool.url='postgresql://forge@127.0.0.1:9/forge'", "doctor", "--quick")
    assert result.exit_code == 1
    assert "FAIL" in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == ["Error: the default loop needs: postgresql (run scripts/setup.sh)"]


def test_doctor_says_how_to_enable_the_sandboxes_that_do_not_work_here(cli, monkeypatch, tmp_path):
    """Where bubblewrap does not work and no Docker engine answers, their rows say so and how to enable them."""
    from forge_cli.sandbox import bwrap

    monkeypatch.setattr(bwrap, "unavailable", lambda: "bubblewrap is not installed (apt-get install bubblewrap)")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")  # nothing listens there
    result = cli("doctor", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr  # neither is needed by the default loop
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    assert checks["bubblewrap"]["ok"] is False and "apt-get install bubblewrap" in checks["bubblewrap"]["detail"]
    assert "plain subprocesses" in checks["bubblewrap"]["detail"]
    docker = checks["docker engine"]
    assert docker["ok"] is False and "no-engine.sock" in docker["detail"] and "docker-engine.sh" in docker["detail"]


def test_without_bubblewrap_a_local_sandbox_warns_once_and_runs_a_plain_subprocess(monkeypatch, tmp_path, caplog):
    import asyncio
    import logging

    from forge_cli.errors import ForgeError
    from forge_cli.sandbox import bwrap, local

    monkeypatch.setattr(bwrap, "unavailable", lambda: "bubblewrap is not installed (apt-get install bubblewrap)")
    monkeypatch.setattr(local, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="forge.sandbox"):
        boxes = [local.LocalSandbox(tmp_path / f"w{i}") for i in range(2)]
    warnings = [r.getMessage() for r in caplog.records if r.name == "forge.sandbox"]
    assert len(warnings) == 1 and warnings[0].startswith("isolation is reduced: bubblewrap is not installed")
    assert not any(box.isolated for box in boxes) and boxes[0].host_command(["true"], {}) == ["true"]  # no bwrap argv
    ran = asyncio.run(boxes[0].exec(["sh", "-c", "echo ran"], timeout_s=30))
    assert (ran.exit_code, ran.stdout) == (0, "ran\n")
    with pytest.raises(ForgeError, match="isolation = bwrap, but bubblewrap is not installed"):
        local.LocalSandbox(tmp_path / "strict", isolation="bwrap")
    for box in boxes:
        asyncio.run(box.close())
