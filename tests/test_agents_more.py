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
import json
import os
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config import load_config
from forge_cli.rollout.driver import rollout
from forge_cli.rollout.records import RolloutRequest
from tests.docker_support import docker_engine, sandbox_containers  # noqa: F401  (a fixture)

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


def solve_files_task(name: str, model: Path, tmp_path: Path, sandbox: str = "local",
                     **more: Any) -> tuple[Any, dict[str, float], Any]:
    """One ``files`` task for ``name`` in bubblewrap (or ``sandbox``), with ``more`` config keys: the
    trajectory (its completions and requests), the gateway's request counts by endpoint (2xx only) and
    the scoring engine."""
    from forge_cli.gateway.server import serve_gateway

    config = load_config(env={}, overrides={
        "model.path": str(model), "model.engine.type": "scripted",
        "model.engine.policy": "forge_cli.tasks.demo_policies:files_agent", "gateway.port": 0,
        "run.dir": str(tmp_path / "runs"), "rollout.sandbox": sandbox, "sandboxes.local.isolation": "bwrap",
        "rollout.infra_retries": 0, **more})  # an agent that cannot start is this test's failure, not a retry
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


# the agents beyond the first seven that take Forge's MCP servers, and the name each offers the shell server's tool
# under: the programs offer it beside their own tools; the library agents' runners offer it instead of their shell
MCP_AGENTS = {"gemini-cli": "mcp_shell_shell", "qwen-code": "mcp__shell__shell", "kilo": "shell_shell",
              "copilot": "shell-shell", "pydantic-ai": "shell", "langgraph": "shell", "agno": "shell", "autogen": "shell",
              "google-adk": "shell", "crewai": "shell", "llama-index": "shell", "dspy": None, "cn": "shell",
              "hermes-agent": "mcp__shell__shell", "gptme": "shell_shell_"}
RUNNERS = {"pydantic-ai", "langgraph", "agno", "autogen", "google-adk", "crewai", "llama-index", "dspy"}


def offered(completion: Any) -> dict[str, Any]:
    """The tools a completion's request offered, by name (Chat Completions', Ollama's or Gemini's shape)."""
    tools = {}
    for tool in completion.request.get("tools") or ():
        if "function" in tool:
            tools[tool["function"]["name"]] = tool["function"]
        tools.update({f["name"]: f for f in tool.get("functionDeclarations") or ()})
    return tools


@pytest.mark.parametrize("name", sorted(MCP_AGENTS))
def test_the_agent_takes_forges_shell_mcp_server(name, installed_agent, scoring_model, tmp_path, local_sandbox):
    """``mcp = ["shell"]``: Forge writes its shell server into the agent's own configuration (or its runner's
    ``--mcp-config``), the agent starts it inside bubblewrap and offers its tool (its schema's ``timeout_s``
    says whose it is); the policy calls it and the task's file is made through it."""
    installed_agent(name)
    trajectory, _, _ = solve_files_task(name, scoring_model, tmp_path, **{f"scaffolds.{name}.mcp": ["shell"]})
    events = {e.kind: e.data for e in trajectory.events}
    assert trajectory.status == "completed" and trajectory.rewards["outcome"] == 1.0, (trajectory.error, events)
    tool = MCP_AGENTS[name]
    # the first call that offered tools (gptme may ask for a title first, without any)
    first = next((c for c in trajectory.completions if c.request.get("tools")), trajectory.completions[0])
    if tool is None:  # DSPy lists its tools in its own text: the server's, not the runner's shell
        assert "timeout_s" in json.dumps(first.request) and not first.tool_calls
        return
    tools = offered(first)
    tool = next((n for n in tools if n == tool or (tool.endswith("_") and n.startswith(tool))), tool)  # gptme: a hash after it
    assert "timeout_s" in json.dumps(tools.get(tool)), sorted(tools)
    if name in RUNNERS:
        assert set(tools) == {tool}, sorted(tools)  # instead of the runner's own shell
    assert [c["name"] for c in first.tool_calls or []] == [tool]
    assert trajectory.rewards["process"] == 0.0  # the call fits the schema the agent offered


def test_gemini_cli_takes_forges_mcp_server_in_docker(installed_agent, scoring_model, tmp_path, docker_engine):  # noqa: F811
    """The same in a container: the server runs from the read-only agents folder's own venv inside it."""
    installed_agent("gemini-cli")
    trajectory, endpoints, _ = solve_files_task("gemini-cli", scoring_model, tmp_path, sandbox="docker",
                                                **{"scaffolds.gemini-cli.mcp": ["shell"]})
    assert trajectory.status == "completed" and trajectory.rewards["outcome"] == 1.0, trajectory.error
    assert [c["name"] for c in trajectory.completions[0].tool_calls or []] == ["mcp_shell_shell"]
    assert any(e.endswith(":streamGenerateContent") for e in endpoints), endpoints
    mine = [c for c in sandbox_containers(docker_engine) if f":{os.getpid()}:" in str(c.labels)]
    assert mine == []  # its container was removed


# five agents on three APIs: Chat Completions (llm, pydantic-ai, langgraph), Ollama (agno), Gemini (google-adk)
MIXED = ("llm", "pydantic-ai", "langgraph", "agno", "google-adk")


def test_forge_train_on_a_mix_of_five_agents(cli, installed_agent, scoring_model, tmp_path, local_sandbox):
    """``forge train --scaffold-mix llm,pydantic-ai,langgraph,agno,google-adk``: five agent programs on three
    APIs at once, each group in its turn's agent (equal weights: every five groups hold all five), each step
    training on all five agents' trajectories through one pool, scheduler and prefix tree. The scheduler is strict
    FIFO here so that a step's five groups are five consecutive turns (a window may take a later group that
    finished first: then a step holds a mix, not necessarily all five)."""
    from types import SimpleNamespace

    from forge_cli.pool.store import DataPool
    from forge_cli.report.metrics import read_metrics
    from forge_cli.train.prefix_tree import unique_tokens

    for name in MIXED:
        installed_agent(name)
    sets = {"model.engine.type": "scripted", "model.engine.policy": "forge_cli.tasks.demo_policies:files_agent",
            "rollout.sandbox": "local", "sandboxes.local.isolation": "bwrap", "gateway.port": 0,
            "run.dir": str(tmp_path / "runs"), "train.engine": "torch", "train.groups_per_step": len(MIXED),
            "train.group_size": 2, "train.eval_every": 0, "rollout.infra_retries": 0,
            "pool.scheduler.type": "fifo"}  # each step takes the next five groups in order: five turns in a row
    flags = [part for key, value in sets.items() for part in ("--set", f"{key}={value}")]
    done = cli(*flags, "train", "--no-live", "--run", "mix", "--model", str(scoring_model), "--scaffold-mix",
               ",".join(MIXED), "--task", "files", "--steps", "2", "--warmstart", "never")
    assert done.exit_code == 0, done.stdout + done.stderr
    run = tmp_path / "runs" / "mix"
    steps = read_metrics(run).steps
    assert [(s.step, s.policy_version, s.groups) for s in steps] == [(1, 1, 5), (2, 2, 5)]  # trained, swapped in
    assert all(s.loss == s.loss and s.samples >= 2 * len(MIXED) for s in steps)  # no NaN; every call a sample
    pool = DataPool.sqlite(run / "pool.sqlite")
    for s in steps:
        trajectories = [pool.trajectory(t.id) for gid in s.group_ids for t in pool.group(gid).trajectories]
        assert sorted({t.scaffold for t in trajectories}) == sorted(MIXED)  # each step: all five agents' work
        assert all(t.status == "completed" and t.rewards.get("outcome") == 1.0 for t in trajectories), [
            (t.scaffold, t.error) for t in trajectories if t.status != "completed"]
        assert all(c.output_ids and c.advantage is not None for t in trajectories for c in t.completions)
        # the prefix tree's saving per agent: each agent's calls of the step, in a tree of their own
        for name in MIXED:
            mine = [SimpleNamespace(tokens=list(c.prompt_ids) + list(c.output_ids))
                    for t in trajectories if t.scaffold == name for c in t.completions]
            assert s.tokens_by_scaffold[name] == sum(len(x.tokens) for x in mine)
            assert s.unique_tokens_by_scaffold[name] == unique_tokens(mine)
    pool.close()
    report = cli(*flags, "report", "mix")
    assert report.exit_code == 0, report.stdout + report.stderr
    row = next(line for line in (run / "report" / "summary.md").read_text().splitlines() if "prefix saving per scaffold" in line)
    assert all(f"{name} " in row for name in MIXED), row
