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
