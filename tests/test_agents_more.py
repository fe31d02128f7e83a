"""The black-box agents beyond the first seven, each installed by Forge's installer (uv for the PyPI ones,
npm for the others) and run end to end: a real rollout through a real gateway in bubblewrap, the
scripted ``files_agent`` policy answering in the model's tool syntax, the agent parsing it and running
the command with *its own* shell tool, the ``files`` verifier checking the file it made.

Each agent speaks its own API to the gateway (Chat Completions, Gemini's streamGenerateContent, Ollama's
``/api/chat``) — counted per endpoint by the gateway's metrics — and every later prompt of a trajectory
starts with the ids sampled for its earlier turns (no drift), but for the two agents in ``HISTORY``. The scoring model is the small one
(``scoring_model``): these agents send up to ~26k-token prompts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config import load_config
from forge_cli.rollout.driver import rollout
from forge_cli.rollout.records import RolloutRequest

pytestmark = pytest.mark.slow

# agent -> (the endpoint it calls, as the gateway's metrics label it; the shell tool it offers and calls)
AGENTS: dict[str, tuple[str, str | None]] = {
    "qwen-code": ("/chat/completions", "run_shell_command"),
    "gemini-cli": (":streamGenerateContent", "run_shell_command"),
    "pi": ("/chat/completions", "bash"),
    "cn": ("/chat/completions", "Bash"),
    "gptme": ("/chat/completions", "shell"),
    "pydantic-ai": ("/chat/completions", "shell"),
    "langgraph": ("/chat/completions", "shell"),
    "agno": ("/api/chat", "shell"),
    "llm": ("/chat/completions", "shell"),
    "google-adk": (":generateContent", "shell"),
    "autogen": ("/chat/completions", "shell"),
    "open-interpreter": ("/chat/completions", "execute"),  # re-sends its call rewritten: see HISTORY
    "copilot": ("/chat/completions", "bash"),
    "hermes-agent": ("/chat/completions", "terminal"),
    "kilo": ("/chat/completions", "bash"),
    "crewai": ("/chat/completions", "shell"),
    "llama-index": ("/chat/completions", "shell"),
    "dspy": ("/chat/completions", None),  # no API tools: DSPy's own [[ ## field ## ]] text names the tool
}
# how a later prompt matches the ids sampled before it, where it is not "exact" (forge_cli.pool.types.PromptHistory):
# DSPy writes its whole trajectory into one new user message each call (no assistant turns: every prompt is a
# first); open-interpreter sends its earlier code call back rewritten, so that prompt diverges (a new branch,
# which the prefix tree trains exactly)
HISTORY = {"dspy": ["first", "first", "first"], "open-interpreter": ["first", "drifted"]}


def solve_files_task(name: str, model: Path, tmp_path: Path) -> tuple[Any, dict[str, float], Any]:
    """One ``files`` task for ``name`` in bubblewrap: the trajectory (its completions and requests), the
    gateway's request counts by endpoint (2xx only) and the scoring engine."""
    from forge_cli.gateway.server import serve_gateway

    config = load_config(env={}, overrides={
        "model.path": str(model), "model.engine.type": "scripted",
        "model.engine.policy": "forge_cli.tasks.demo_policies:files_agent", "gateway.port": 0,
        "run.dir": str(tmp_path / "runs"), "rollout.sandbox": "local", "sandboxes.local.isolation": "bwrap",
        "rollout.infra_retries": 0})  # an agent that cannot start is this test's failure, not a retry
    request = RolloutRequest(scaffold=name, suite="files", groups=1, n=1, trajectory_timeout_s=240)

    async def go() -> tuple[Any, dict[str, float], Any]:
        async with serve_gateway(config, "more") as gw:
            gw.state.record_requests = True
            await rollout(config, request, gateway=gw)
            (trajectory,) = [gw.pool.trajectory(t.id) for g in gw.pool.groups() for t in g.trajectories]
            endpoints: dict[str, float] = {}
            for metric in gw.state.metrics.requests.collect():
                for s in metric.samples:
                    if s.name.endswith("_total") and s.labels["status"].startswith("2"):
                        endpoints[s.labels["endpoint"]] = endpoints.get(s.labels["endpoint"], 0) + s.value
            return trajectory, endpoints, gw.run.engine

    return asyncio.run(go())


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_the_agent_does_a_files_task_with_its_own_shell_tool(name, installed_agent, scoring_model, tmp_path,
                                                             local_sandbox):
    from forge_cli.engine.hf import score

    endpoint, shell = AGENTS[name]
    installed_agent(name)
    trajectory, endpoints, engine = solve_files_task(name, scoring_model, tmp_path)
    events = {e.kind: e.data for e in trajectory.events}
    assert trajectory.status == "completed", (trajectory.error, events.get("agent-exit"))
    assert trajectory.rewards["outcome"] == 1.0, events.get("verified")  # the verifier found the file
    calls = trajectory.completions
    # the agent offered its own shell tool and ran the policy's command through it
    if shell is not None:
        assert [c["name"] for c in calls[0].tool_calls or []] == [shell], calls[0].tool_calls
    else:
        assert not calls[0].tool_calls and "[[ ## next_tool_name ## ]]\nshell" in engine.tokenizer.decode(calls[0].output_ids)
    # it spoke its own API: every model call went to that endpoint
    assert {e for e in endpoints if e.endswith(endpoint)} and sum(
        v for e, v in endpoints.items() if e.endswith(endpoint)) >= len(calls), endpoints
    # the later prompts start with the ids sampled for the earlier turns
    kinds = [c.history.kind for c in calls if c.history is not None]
    if name in HISTORY:
        assert kinds == HISTORY[name], kinds
    else:
        assert "drifted" not in kinds and "exact" in kinds, kinds
    # the recorded logprobs are the scoring model's for those ids
    shortest = min(calls, key=lambda c: len(c.prompt_ids))
    again, _ = score(engine.model, list(shortest.prompt_ids), list(shortest.output_ids), shortest.sampling.temperature, None)
    assert again == pytest.approx(list(shortest.output_logprobs), abs=1e-4)


def test_scaffold_doctor_runs_one_task_and_names_what_went_wrong(cli, installed_agent, scoring_model, tmp_path,
                                                                local_sandbox, monkeypatch):
    """`forge scaffold doctor pi`: every check passes, the task through pi's own bash tool; then with pi's
    provider pointed at a port nothing listens on (its models.json, as a user's typo would), the task fails
    and the doctor says the agent made no model call, how it exited and its last error line."""
    import json

    installed_agent("pi")
    done = cli("scaffold", "doctor", "pi", "--model", str(scoring_model), "--json")
    assert done.exit_code == 0, done.stdout
    checks = {c["check"]: c for c in json.loads(done.stdout)}
    assert all(c["ok"] for c in checks.values()), checks
    assert checks["starts"]["detail"].startswith("pi --version: 0.")
    assert "2 model calls; called bash; exited 0; the verifier found the file" == checks["one task"]["detail"]
    (tmp_path / "forge.toml").write_text('[scaffolds.pi]\nenv = {PI_CODING_AGENT_DIR = "/nonexistent"}\n')
    broken = cli("scaffold", "doctor", "pi", "--model", str(scoring_model), "--json", "--timeout", "60")
    assert broken.exit_code == 1
    task = json.loads(broken.stdout)[-1]
    assert task["ok"] is False and task["detail"].startswith("0 model calls; called no tool"), task
