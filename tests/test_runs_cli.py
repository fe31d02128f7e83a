"""``forge runs``: every run under run.dir with its status, read from real locks held (or left
behind) by real child processes and from train_state.json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forge_cli.runs import lock_run
from tests.conftest import ROOT

HOLDER = (
    "import sys\nfrom pathlib import Path\nfrom forge_cli.runs import lock_run\n"
    "lock = lock_run(Path(sys.argv[1]))\nprint('locked', flush=True)\nsys.stdin.read()\n"
)


def make_run(root: Path, name: str, state: dict | None = None, metrics: list[dict] | None = None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    if state is not None:
        (run / "train_state.json").write_text(json.dumps(state))
    if metrics is not None:
        (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return run


def state(status: str, started: float, **kw) -> dict:
    return {"status": status, "step": kw.get("step", 10), "policy_version": kw.get("version", 10), "started_at": started,
            "updated_at": started + 60, "best_heldout_success": kw.get("best"), "minutes": None, "error": None}


class Holder:
    """A child process that holds a run's lock until it is stopped (or killed)."""

    def __init__(self, run: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.proc.stdout.readline().strip() == "locked"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


@pytest.fixture
def runs_root(tmp_path):
    return tmp_path / "runs"


def _runs(cli, root: Path) -> list[dict]:
    result = cli("--set", f"run.dir={root}", "runs", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_status_of_each_run(cli, runs_root):
    now = time.time()
    live = make_run(runs_root, "live", state("running", now - 10, best=0.4))
    killed = make_run(runs_root, "killed", state("running", now - 20, step=7, version=7))
    make_run(runs_root, "done", state("finished", now - 30, step=50, version=50, best=0.75),
             metrics=[{"kind": "step", "step": 50, "time_s": 123.5, "policy_version": 50}])
    make_run(runs_root, "stopped", state("stopped", now - 40))
    make_run(runs_root, "broke", {**state("failed", now - 50), "error": "boom"})
    rollout = make_run(runs_root, "rollout-only")  # never trained
    os.utime(rollout / "config.json", (now - 60, now - 60))
    served = make_run(runs_root, "served")  # a gateway's run, served right now
    os.utime(served / "config.json", (now - 70, now - 70))

    holders = [Holder(live), Holder(served)]
    gone = Holder(killed)
    gone.kill()  # SIGKILL: its lock file stays, its flock is gone
    assert (killed / ".lock").exists()
    try:
        rows = _runs(cli, runs_root)
        assert [r["name"] for r in rows] == ["live", "killed", "done", "stopped", "broke", "rollout-only", "served"]
        by = {r["name"]: r for r in rows}
        assert {n: r["status"] for n, r in by.items()} == {
            "live": "running", "killed": "killed", "done": "finished", "stopped": "stopped", "broke": "failed",
            "rollout-only": None, "served": "running"}
        assert by["done"]["steps"] == 50 and by["done"]["policy_version"] == 50
        assert by["done"]["best_heldout_success"] == 0.75 and by["done"]["wall_s"] == 123.5  # the metrics' time_s
        assert by["killed"]["steps"] == 7 and by["killed"]["wall_s"] == 60  # no metrics: updated_at − started_at
        assert by["live"]["created"] == pytest.approx(now - 10)

        table = cli("--set", f"run.dir={runs_root}", "runs")
        assert table.exit_code == 0, table.output
        for word in ("live", "running", "killed", "finished", "75.0%", "2m04s"):
            assert word in table.stdout
    finally:
        for h in holders:
            h.stop()
    # the holders ended cleanly: their lock files went with them, nothing runs any more
    by = {r["name"]: r["status"] for r in _runs(cli, runs_root)}
    assert by["live"] == "killed" and by["served"] is None


def test_a_lock_file_naming_a_live_process_without_its_lock_is_not_running(cli, runs_root):
    """The pid in a stale lock file may be anyone's now (here: this very process): only a held
    flock makes a run running."""
    run = make_run(runs_root, "stale", state("running", time.time()))
    (run / ".lock").write_text(f"{os.getpid()}\n")
    assert _runs(cli, runs_root)[0]["status"] == "killed"


def test_forge_runs_never_takes_or_creates_a_lock(cli, runs_root):
    run = make_run(runs_root, "r", state("finished", time.time()))
    _runs(cli, runs_root)
    assert not (run / ".lock").exists()
    holder = Holder(run)
    try:
        before = (run / ".lock").stat().st_ino
        assert _runs(cli, runs_root)[0]["status"] == "running"
        assert (run / ".lock").stat().st_ino == before
    finally:
        holder.stop()
    with lock_run(run):  # free again: forge runs left nothing behind
        pass


def test_no_runs(cli, runs_root):
    result = cli("--set", f"run.dir={runs_root}", "runs")
    assert result.exit_code == 0 and "no runs under" in result.stdout
    assert _runs(cli, runs_root) == []
