"""``forge doctor``: real probes of this machine's installation."""

from __future__ import annotations

import json
import os

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
    if os.geteuid() == 0:  # measured from inside: a plain subprocess of root keeps root's capabilities and calls
        caps, flt = checks["sandbox capabilities"], checks["seccomp filter"]
        assert caps["ok"] is False and "a plain subprocess" in caps["detail"], caps
        assert flt["ok"] is False and "mount" in flt["detail"] and "ptrace" in flt["detail"], flt
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


def test_doctor_says_what_isolation_is_in_force_measured_from_inside_a_sandbox(cli):
    """The isolation rows come from a probe run inside a local sandbox as a rollout opens one: with
    bubblewrap, no capability and the seccomp filter (each attempt refused), the cgroups, the disk limit's
    kind, and whether a program inside could make a user namespace."""
    from forge_cli.sandbox import bwrap, quota, seccomp

    result = cli("doctor", "--json", "--quick")
    checks = {c["name"]: c for c in json.loads(result.stdout)}
    rows = ("sandbox capabilities", "seccomp filter", "sandbox cgroups", "sandbox disk limit", "user namespaces")
    assert all(name in checks and not checks[name]["required"] for name in rows), sorted(checks)
    if bwrap.unavailable() is None and seccomp.unavailable() is None:
        assert checks["sandbox capabilities"]["ok"] and "CapEff 0" in checks["sandbox capabilities"]["detail"]
        assert checks["seccomp filter"]["ok"], checks["seccomp filter"]
        for attempt in ("mount", "open_by_handle", "unshare_user", "ptrace"):
            assert attempt in checks["seccomp filter"]["detail"]
        assert checks["user namespaces"]["ok"] and "refused inside sandboxes" in checks["user namespaces"]["detail"]
    disk = checks["sandbox disk limit"]
    assert disk["ok"] == (quota.unavailable() is None) and ("ext4" in disk["detail"] or "polled" in disk["detail"])
