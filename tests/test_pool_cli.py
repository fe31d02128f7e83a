"""``forge pool stats|show|export`` on a real run folder, SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid

import pytest

from forge_cli.config import load_config
from forge_cli.pool.store import open_pool
from forge_cli.pool.types import NewCompletion
from forge_cli.runs import new_run


@pytest.fixture(params=["sqlite", "postgres"])
def run(request, tmp_path):
    url = "sqlite" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    config = load_config(env={}, overrides={"pool.url": url, "pool.max_active_groups": 10, "pool.scheduler.window_fraction": 0.3})
    run_dir = new_run(config, name=f"r-{request.param}-{uuid.uuid4().hex[:10]}")
    pool = open_pool(url, run_dir)
    groups = [pool.submit_group(f"task-{i}", 2, "truncate-bc") for i in range(3)]
    first = groups[0].trajectories[0].id
    for g in groups[:2]:
        for t in g.trajectories:
            pool.start_trajectory(t.id)
            for seq in range(2):
                pool.append_completion(NewCompletion(t.id, prompt_ids=[1, 2, 3 + seq], output_ids=[7, 8],
                                                     output_logprobs=[-0.5, -0.25], policy_version=0, tool_format="hermes"))
            pool.finish_trajectory(t.id, rewards={"outcome": 1.0})
    pool.append_events(first, [{"kind": "truncate", "data": {"dropped": 1}}])
    pool.take_batch(1, trainer_version=2, window=3)
    pool.close()
    return run_dir, first


def test_stats(cli, run):
    run_dir, _ = run
    result = cli("pool", "stats", str(run_dir), "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["groups"]["consumed"] == 1 and data["groups"]["active"] == 2
    assert data["trajectories"]["completed"] == 4 and data["trajectories"]["queued"] == 2
    assert data["queue"] == {"head": 1, "next_index": 3, "window": 3}
    assert data["offpolicy_age"] == {"n": 4, "mean": 2.0, "max": 2}
    assert data["bytes_per_token"] == pytest.approx((5 * 4 + 2 * 4) / 5)
    table = cli("pool", "stats", str(run_dir))
    assert table.exit_code == 0 and "window [1, 3]" in table.stdout


def test_show_finds_the_trajectory_by_id(cli, run, tmp_path):
    run_dir, first = run
    result = cli("--set", f"run.dir='{run_dir.parent}'", "pool", "show", first)
    assert result.exit_code == 0, result.stderr
    assert "truncate" in result.stdout and "reward outcome" in result.stdout and "hermes" in result.stdout
    as_json = json.loads(cli("pool", "show", first, "--run", str(run_dir), "--json").stdout)
    assert [c["output_ids"] for c in as_json["completions"]] == [[7, 8], [7, 8]]
    missing = cli("pool", "show", "nope", "--run", str(run_dir))
    assert missing.exit_code == 1 and "no trajectory 'nope'" in missing.stderr


def test_export_jsonl(cli, run, tmp_path):
    run_dir, first = run
    out = tmp_path / "export.jsonl"
    result = cli("pool", "export", str(run_dir), "--jsonl", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and rows[0]["id"] == first and rows[0]["completions"][1]["prompt_ids"] == [1, 2, 4]
    assert cli("pool", "export", str(run_dir)).exit_code == 1


def test_unknown_run_is_one_red_line(cli):
    result = cli("pool", "stats", "no-such-run")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: no run 'no-such-run'") and len(result.stderr.strip().splitlines()) == 1


# ---- broken runs, and errors as one line ------------------------------------------------------------------


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens there once the socket is closed


def _broken_runs(tmp_path):
    """run.dir with one good SQLite run (oldest) and, newer, runs that cannot be read or recorded nothing."""
    import os

    runs = tmp_path / "runs"
    good = new_run(load_config(env={}, overrides={"run.dir": str(runs)}), "good")
    with open_pool("sqlite", good) as pool:
        tid = pool.submit_group("t", 1, "react").trajectories[0].id
    bad_key = new_run(load_config(env={}, overrides={"run.dir": str(runs)}), "bad-key")
    saved = bad_key / "config.json"
    saved.write_text(saved.read_text().replace('"pool": {', '"pool": {"bogus": 1, ', 1))
    unreachable_url = f"postgresql://forge:secret@127.0.0.1:{_closed_port()}/postgres"
    unreachable = new_run(load_config(env={}, overrides={"run.dir": str(runs), "pool.url": unreachable_url}), "unreachable")
    empty = new_run(load_config(env={}, overrides={"run.dir": str(runs)}), "empty")  # recorded nothing: no pool
    for age, run_dir in enumerate((empty, unreachable, bad_key, good)):
        os.utime(run_dir, (1e9 - age * 100, 1e9 - age * 100))  # newest first: the good run comes last
    return runs, tid, saved


def test_pool_show_skips_a_broken_run_with_one_warning_line(cli, tmp_path):
    runs, tid, saved = _broken_runs(tmp_path)
    result = cli("--set", f"run.dir='{runs}'", "pool", "show", tid, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["id"] == tid
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("Warning: skipped run unreachable: cannot connect to the PostgreSQL pool at ")
    assert "secret" not in result.stderr  # the URL's password is not printed
    assert lines[1] == f"Warning: skipped run bad-key: {saved}: pool.bogus: unknown key"
    missing = cli("--set", f"run.dir='{runs}'", "pool", "show", "nope")
    assert missing.exit_code == 1
    assert missing.stderr.splitlines()[-1] == "Error: no trajectory 'nope' in 4 runs (2 skipped)"
    named = cli("--set", f"run.dir='{runs}'", "pool", "show", "nope", "--run", "empty")  # a run named: its pool must be there
    assert named.exit_code == 1 and named.stderr.startswith(f"Error: no pool at {runs / 'empty' / 'pool.sqlite'}")


def test_errors_of_a_broken_run_are_one_line(cli, tmp_path):
    runs, _, saved = _broken_runs(tmp_path)
    bad = cli("--set", f"run.dir='{runs}'", "pool", "stats", "bad-key")
    assert bad.exit_code == 1 and bad.stderr == f"Error: {saved}: pool.bogus: unknown key\n"
    down = cli("--set", f"run.dir='{runs}'", "pool", "export", str(runs / "unreachable"), "--jsonl")
    assert down.exit_code == 1 and down.stderr.count("\n") == 1, down.stderr
    assert down.stderr.startswith("Error: cannot connect to the PostgreSQL pool at postgresql://forge:***@127.0.0.1:")
    assert "Is the server running on that host" in down.stderr  # psycopg's second line, folded in


def test_any_multi_line_forge_error_prints_as_one_line(cli, monkeypatch):
    import forge_cli.commands.pool
    from forge_cli.errors import ForgeError

    def broken(config, run):
        raise ForgeError("first line\n\tsecond line  \r\n\nthird")

    monkeypatch.setattr(forge_cli.commands.pool, "resolve_run", broken)  # the name the command calls
    result = cli("pool", "stats", "anything")
    assert result.exit_code == 1 and result.stderr == "Error: first line second line third\n"

