"""Run folders: a run name is a name, reading commands take a folder, one server per run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.config import load_config
from forge_cli.errors import ForgeError
from forge_cli.runs import claim_run, lock_run, new_run, resolve_run, run_config
from tests.conftest import ROOT


def _config(run_dir: Path, **overrides):
    return load_config(env={}, overrides={"run.dir": str(run_dir), **overrides})


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("name", ["../../x", "../x", "/abs/path", "a/b", "..", ".", ".hidden", "-x", "a b", "a\nb",
                                  "x" * 60, "a\\b", "~"])
def test_a_run_name_that_is_not_a_plain_name_is_refused(tmp_path, name):
    runs = tmp_path / "deep" / "runs"
    before = _tree(tmp_path)
    with pytest.raises(ForgeError, match="is not a plain name"):
        new_run(_config(runs), name)
    assert _tree(tmp_path) == before  # nothing written, inside run.dir or out
    with pytest.raises(ForgeError, match="is not a plain name"):  # run.name is a name too
        new_run(_config(runs, **{"run.name": name}))
    assert _tree(tmp_path) == before


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab9._-/ \\~\n", max_size=12))
def test_a_run_is_created_inside_run_dir_or_not_at_all(name):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        runs = root / "a" / "runs"
        runs.mkdir(parents=True)
        try:
            run_dir = new_run(_config(runs), name or None)
        except ForgeError as exc:
            assert "is not a plain name" in str(exc)
            assert _tree(root) == {"a", "a/runs"}
            return
        assert run_dir.resolve().parent == runs.resolve() and (name == "" or run_dir.name == name)
        assert _tree(root) == {"a", "a/runs", f"a/runs/{run_dir.name}", f"a/runs/{run_dir.name}/config.json"}


def test_plain_names_are_runs(tmp_path):
    config = _config(tmp_path / "runs")
    for name in ("exp-1", "2024.01.02_a", "A" * 59):
        assert new_run(config, name) == tmp_path / "runs" / name
    assert new_run(config).parent == tmp_path / "runs"  # a timestamp


def test_resolve_run_takes_a_name_first_then_an_existing_folder(tmp_path):
    config = _config(tmp_path / "runs")
    named = new_run(config, "r1")
    (tmp_path / "r1").mkdir()  # a folder of the same name in the working folder: the run wins
    assert resolve_run(config, "r1") == named
    elsewhere = tmp_path / "elsewhere" / "old-run"
    elsewhere.mkdir(parents=True)
    assert resolve_run(config, str(elsewhere)) == elsewhere
    assert resolve_run(config, "../" + tmp_path.name + "/elsewhere/old-run") == Path("../" + tmp_path.name + "/elsewhere/old-run")
    with pytest.raises(ForgeError, match="no run 'nope'.*runs: r1"):
        resolve_run(config, "nope")


def test_a_bad_run_config_is_one_line_naming_the_key(tmp_path):
    config = _config(tmp_path / "runs")
    run_dir = new_run(config, "r")
    saved = run_dir / "config.json"
    text = saved.read_text()
    saved.write_text(text.replace('"pool": {', '"pool": {"bogus": 1, ', 1))
    with pytest.raises(ForgeError) as info:
        run_config(config, run_dir)
    assert str(info.value) == f"{saved}: pool.bogus: unknown key"
    saved.write_text(text.replace('"window_fraction": ', '"window_fraction": "lots" and ', 1)[:-3])
    with pytest.raises(ForgeError, match=r"config.json: not valid JSON \(.*\)$") as info:
        run_config(config, run_dir)
    assert "\n" not in str(info.value)


# ---- one server per run -----------------------------------------------------------------------------------


def _holder(run_dir: Path) -> subprocess.Popen:
    code = "import sys, time\nfrom forge_cli.runs import lock_run\nlock_run(sys.argv[1])\nprint('locked', flush=True)\ntime.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_server_on_a_run_is_refused_until_the_first_is_gone(tmp_path):
    run_dir = new_run(_config(tmp_path / "runs"), "r")
    other = _holder(run_dir)
    try:
        with pytest.raises(ForgeError, match=f"already being served by process {other.pid} "):
            lock_run(run_dir)
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait(timeout=30)
    # killed, it holds nothing: the run can be served again, and the lock names us
    lock = lock_run(run_dir)
    assert lock.held and (run_dir / ".lock").read_text() == f"{os.getpid()}\n"
    code = "import sys\nfrom forge_cli.runs import lock_run\nlock_run(sys.argv[1])\n"
    refused = subprocess.run([sys.executable, "-c", code, str(run_dir)], cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode != 0 and f"already being served by process {os.getpid()} " in refused.stderr
    with pytest.raises(ForgeError, match="already being served"):  # in the same process, too
        lock_run(run_dir)
    lock.release()
    lock.release()
    assert not lock.held and not (run_dir / ".lock").exists()
    with lock_run(run_dir) as again:
        assert again.held
    assert not (run_dir / ".lock").exists()


def test_claim_run_locks_before_it_writes(tmp_path):
    config = _config(tmp_path / "runs", **{"pool.scheduler.window_fraction": 0.5})
    with claim_run(config, "r") as lock:
        assert lock.held and lock.created and lock.run_dir == tmp_path / "runs" / "r"
        saved = (lock.run_dir / "config.json").read_bytes()
        assert json.loads(saved)["pool"]["scheduler"]["window_fraction"] == 0.5
        other = _config(tmp_path / "runs", **{"pool.scheduler.window_fraction": 0.25})
        code = ("import sys\nfrom forge_cli.config import load_config\nfrom forge_cli.runs import claim_run\n"
                "claim_run(load_config(env={}, overrides={'run.dir': sys.argv[1], 'pool.scheduler.window_fraction': 0.25}), 'r')\n")
        refused = subprocess.run([sys.executable, "-c", code, str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True)
        assert refused.returncode != 0 and f"already being served by process {os.getpid()} " in refused.stderr
        with pytest.raises(ForgeError, match="already being served"):
            claim_run(other, "r")
        assert (lock.run_dir / "config.json").read_bytes() == saved  # the refused servers changed nothing
    with claim_run(other, "r") as again:  # continuing the run: not created, its config rewritten
        assert not again.created
        assert json.loads((again.run_dir / "config.json").read_text())["pool"]["scheduler"]["window_fraction"] == 0.25
    with pytest.raises(ForgeError, match="is not a plain name"):
        claim_run(config, "../x")
    assert not (tmp_path / "x").exists()
