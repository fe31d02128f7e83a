"""``forge rollout`` as a user runs it: a built-in scaffold on a built-in suite, through the real
gateway, into a run the pool commands read; the same on Ray."""

from __future__ import annotations

import contextlib
import json
import socket

import pytest

from forge_cli.configs.gateway import SERVE_PORT


def _args(tiny_model, run, *more):
    return ["rollout", "--scaffold", "tool-call", "--task", "calc", "--groups", "3", "--n", "2", "--run", run,
            "--model", str(tiny_model), "--engine", "scripted", "--policy", "forge_cli.tasks.demo_policies:calc", *more]


def test_rollout_runs_verifies_and_records(cli, tiny_model, tmp_path):
    """With no gateway.port set, while forge gateway serve's port is held: a rollout needs no fixed port."""
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    with contextlib.suppress(OSError):  # taken already: held all the same
        held.bind(("127.0.0.1", SERVE_PORT))
        held.listen()
    with held:
        done = cli(*_args(tiny_model, "calc-run"))
    assert done.exit_code == 0, done.stderr
    assert "rollout summary" in done.stdout and "success rate" in done.stdout and "100.0%" in done.stdout
    stats = cli("pool", "stats", "calc-run", "--json")
    data = json.loads(stats.stdout)
    assert data["trajectories"]["completed"] == 6 and data["completions"] == 12  # a tool call, then the answer
    shown = cli("pool", "export", "calc-run", "--jsonl")
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    assert all(r["rewards"]["outcome"] == 1.0 for r in rows)


def test_a_bad_choice_is_one_red_line(cli, tiny_model):
    for sets, args, needle in (([], ["--task", "nope"], "no task suite"), ([], ["--scaffold", "nope"], "no scaffold named 'nope'"),
                               ([], ["--task", "x.jsonl"], "needs a verifier"),
                               ([], ["--sandbox", "nope"], "unknown sandbox 'nope'"),
                               (["--set", 'scaffolds.aider.mcp=["files"]'], ["--scaffold", "aider"],
                                "the agent 'aider' cannot use MCP servers")):  # before any install is looked for
        done = cli("--set", "gateway.port=0", *sets, "rollout", "--model", str(tiny_model), "--engine", "scripted",
                   "--policy", "forge_cli.tasks.demo_policies:calc", "--run", "bad", *args)
        assert done.exit_code == 1 and needle in done.stderr and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.slow
def test_rollout_on_ray(cli, tiny_model, tmp_path, monkeypatch):
    """The same trajectories as Ray tasks on a local Ray instance."""
    monkeypatch.setenv("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    done = cli("--set", "gateway.port=0", *_args(tiny_model, "ray-run", "--executor", "ray"))
    assert done.exit_code == 0, done.stderr
    assert "100.0%" in done.stdout
    data = json.loads(cli("pool", "stats", "ray-run", "--json").stdout)
    assert data["trajectories"]["completed"] == 6 and data["completions"] == 12


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["smolagents", "openai-agents"])
def test_rollout_runs_a_real_black_box_agent_on_files(agent, cli, tiny_model, installed_agent):
    """`forge rollout --scaffold smolagents --task files`: the program installed by `forge scaffold add`,
    launched per trajectory with the trajectory's own URL and key, its work verified from the files."""
    installed_agent(agent)
    done = cli("--set", "gateway.port=0", "rollout", "--scaffold", agent, "--task", "files", "--groups", "2", "--n", "1",
               "--timeout", "300", "--run", "bb", "--model", str(tiny_model), "--engine", "scripted",
               "--policy", "forge_cli.tasks.demo_policies:files_shell")
    assert done.exit_code == 0, done.stderr
    data = json.loads(cli("pool", "stats", "bb", "--json").stdout)
    assert data["trajectories"]["completed"] == 2, done.stdout
    rows = [json.loads(line) for line in cli("pool", "export", "bb", "--jsonl").stdout.splitlines()]
    assert all(r["rewards"]["outcome"] == 1.0 for r in rows), done.stdout  # the files verifier saw the work
    assert all(len(r["completions"]) == 2 for r in rows)  # the shell command, then the answer


def test_rollout_of_a_copy_of_the_embedded_default_samples_the_prompts_it_learned_on(cli, tiny_model, tmp_path):
    """`forge rollout --model` of the embedded default or a copy made from it (a warm copy, a checkpoint:
    its marker file) samples with the scaffold options forge train gives it (no system message, 48 tokens
    a call), so a checkpoint is measured on the prompts it learned; a model without the marker gets the
    scaffold's own. The model samples here (the hf engine): a scripted policy writes its own text and
    keeps the scaffold's options (kv-search and swe-mini need more than 5 turns)."""
    import shutil

    from forge_cli.engine.default_model import MARKER

    plain = tmp_path / "plain"
    shutil.copytree(tiny_model, plain)
    (plain / MARKER).unlink()
    requests = {}
    # unmarked, the tiny Llama is read as a Llama 3 (its tokenizer has Hermes's tags, not Llama's)
    for name, model, sets in (("copy", tiny_model, []), ("plain", plain, ["--set", "model.tool_parser=hermes"])):
        done = cli("--set", "gateway.port=0", "--set", "gateway.record_requests=true", *sets, "rollout", "--scaffold",
                   "tool-call-unlisted", "--task", "calc-1",
                   "--groups", "1", "--n", "1", "--max-tokens", "96", "--run", name, "--model", str(model), "--engine", "hf")
        assert done.exit_code == 0, done.stderr
        (row,) = [json.loads(line) for line in cli("pool", "export", name, "--jsonl").stdout.splitlines()]
        requests[name] = row["completions"][0]["request"]
    assert requests["copy"]["max_tokens"] == 48 and requests["copy"]["messages"][0]["role"] == "user"
    assert requests["plain"]["max_tokens"] > 48 and requests["plain"]["messages"][0]["role"] == "system"
