"""The four PyPI black-box agents (mini-swe-agent, aider, openai-agents, smolagents), installed by the
project's installer, fix a swe-mini repository inside each sandbox backend.

Each run is a real rollout (:func:`forge_cli.rollout.driver.rollout`) through a real gateway
(``serve_gateway``, TCP and its unix socket) with the scripted engine: a policy of
:mod:`forge_cli.tasks.agent_policies` answers in the agent's own protocol and tool format, the agent
program parses it and edits the repository in its sandbox (bubblewrap, or a container without
network), and swe-mini's verifier runs the tests there. Every recorded completion is checked for
exact tokens: ``decode(prompt_ids)`` is the chat template's rendering of the request the agent sent
(recorded by the gateway), and the output ids and logprobs are what the model scores for that text.
The untrained-model run at the end takes all seven agents (the npm ones too) on one vLLM engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from forge_cli.config import load_config
from forge_cli.rollout.records import RolloutRequest
from forge_cli.rollout.driver import rollout
from tests.docker_support import docker_engine, sandbox_containers  # noqa: F401  (a fixture)

POLICIES = {"mini-swe-agent": "mini_swe_agent", "aider": "aider", "openai-agents": "openai_agents",
            "smolagents": "smolagents"}
BUDGET_S = 240.0


def configure(tiny_model: Path, tmp_path: Path, sandbox: str, policy: str | None, **more: Any) -> Any:
    overrides = {"model.path": str(tiny_model), "gateway.port": 0, "run.dir": str(tmp_path / "runs"),
                 "rollout.sandbox": sandbox, **more}
    if policy is not None:
        overrides.update({"model.engine.type": "scripted",
                          "model.engine.policy": f"forge_cli.tasks.agent_policies:{policy}"})
    if sandbox == "local":
        overrides["sandboxes.local.isolation"] = "bwrap"
    return load_config(env={}, overrides=overrides)


def roll(config: Any, scaffold: str, *, groups: int = 1, seed: int = 0,
         timeout_s: float = BUDGET_S) -> tuple[Any, list[Any], Any]:
    """One rollout of ``scaffold`` on swe-mini; the summary, every trajectory (with its completions,
    their requests recorded) and the tokenizer."""
    from forge_cli.gateway.server import serve_gateway

    request = RolloutRequest(scaffold=scaffold, suite="swe-mini", groups=groups, n=1, concurrency=groups,
                             trajectory_timeout_s=timeout_s, seed=seed)

    async def go() -> tuple[Any, list[Any], Any]:
        async with serve_gateway(config, "agents") as gw:
            gw.state.record_requests = True
            summary = await rollout(config, request, gateway=gw)
            trajectories = [gw.pool.trajectory(t.id) for g in gw.pool.groups() for t in g.trajectories]
            return summary, trajectories, gw.state

    return asyncio.run(go())


def rendered(state: Any, api: str, raw: dict[str, Any], tool_format: str) -> str:
    """The chat template's rendering of a recorded request, as the gateway renders its API's body."""
    from forge_cli.gateway.render import Tool, render_prompt

    fmt = state.formats.get(tool_format)
    if api == "openai-chat":
        from forge_cli.gateway.protocol.openai_chat import ChatCompletionRequest, NamedToolChoice
        from forge_cli.gateway.routes.chat import to_turns

        req = ChatCompletionRequest.model_validate(raw)
        tools = [Tool(t.function.name, t.function.description or "",
                      t.function.parameters or {"type": "object", "properties": {}}) for t in (req.tools or [])]
        choice = req.tool_choice if isinstance(req.tool_choice, str) else None
        forced = req.tool_choice.function.name if isinstance(req.tool_choice, NamedToolChoice) else None
        turns = to_turns(req.messages)
    else:
        from forge_cli.gateway.protocol.responses import ResponsesRequest
        from forge_cli.gateway.routes import responses

        req = ResponsesRequest.model_validate(raw)
        tools = responses.to_tools(req)[0]
        choice = req.tool_choice if isinstance(req.tool_choice, str) else None
        forced = req.tool_choice.get("name") if isinstance(req.tool_choice, dict) else None
        turns = responses.to_turns(req)
    return render_prompt(state.tokenizer, turns, tools, fmt, tool_choice=choice, forced_tool=forced).text


def check_exact_tokens(state: Any, api: str, completions: list[Any]) -> None:
    """decode(prompt_ids) is the rendered request; the output ids and logprobs are the model's score of them."""
    from forge_cli.engine.hf import score

    engine = state.engine
    for c in completions:
        assert c.request is not None, "the gateway recorded no request"
        assert state.tokenizer.decode(c.prompt_ids) == rendered(state, api, c.request, c.tool_format), c.seq
        assert len(c.output_logprobs) == len(c.output_ids) > 0
        again, _ = score(engine.model, c.prompt_ids, c.output_ids, c.sampling.temperature, None)
        assert again == pytest.approx(c.output_logprobs, abs=1e-4), c.seq


def solve(name: str, sandbox: str, tiny_model: Path, tmp_path: Path, installed_agent: Any, *, least: int = 2,
          **more: Any) -> list[Any]:
    """``name`` fixes one swe-mini task in ``sandbox``: solved, with exact tokens; its completions."""
    spec = installed_agent(name)
    config = configure(tiny_model, tmp_path, sandbox, POLICIES[name], **more)
    started = time.monotonic()
    summary, trajectories, state = roll(config, name)
    took = time.monotonic() - started
    (traj,) = trajectories
    assert traj.status == "completed" and summary.success_rate == 1.0, (traj.status, traj.error, summary)
    assert traj.rewards.get("outcome") == 1.0
    completions = sorted(traj.completions, key=lambda c: c.seq)
    assert len(completions) >= least
    check_exact_tokens(state, spec.api, completions)
    print(f"{name} in {sandbox}: solved in {took:.1f} s, {len(completions)} completions, "
          f"first prompt {len(completions[0].prompt_ids)} tokens")
    return completions


def seen(completions: list[Any]) -> str:
    """Every request's text as JSON (what the agent sent back: its observations)."""
    return "\n".join(json.dumps(c.request) for c in completions)


def mine(containers: list[Any]) -> list[Any]:
    """The containers this process's sandboxes started (the engine may be shared with other test sessions)."""
    from forge_cli.sandbox.docker import OWNER_LABEL

    return [c for c in containers if f":{os.getpid()}:" in c.labels.get(OWNER_LABEL, "")]


@pytest.fixture
def docker_sandbox(docker_engine):  # noqa: F811
    yield docker_engine
    assert mine(sandbox_containers(docker_engine)) == []  # every container was removed


# ---- mini-swe-agent: one bash tool, chat completions, submits with an echo -----------------------------


@pytest.mark.slow
def test_mini_swe_agent_local(scoring_model, tmp_path, installed_agent, local_sandbox):
    completions = solve("mini-swe-agent", "local", scoring_model, tmp_path, installed_agent)
    assert '"name": "bash"' in seen(completions) and "edited" in seen(completions)


@pytest.mark.slow
def test_mini_swe_agent_docker(scoring_model, tmp_path, installed_agent, docker_sandbox):
    completions = solve("mini-swe-agent", "docker", scoring_model, tmp_path, installed_agent)
    assert "edited" in seen(completions)

# ---- smolagents: a ToolCallingAgent with a shell tool, tool_choice "required", ends with final_answer -----


@pytest.mark.slow
def test_smolagents_local(scoring_model, tmp_path, installed_agent, local_sandbox):
    completions = solve("smolagents", "local", scoring_model, tmp_path, installed_agent)
    assert '"final_answer"' in seen(completions) and "edited" in seen(completions)


@pytest.mark.slow
def test_smolagents_docker_with_mcp_shell(scoring_model, tmp_path, installed_agent, docker_sandbox):
    """``mcp = ["shell"]``: the runner's tools are those of Forge's shell MCP server (smolagents' own MCP
    client needs mcpadapt; the runner talks to the server with the mcp SDK of the servers' venv), started
    over stdio inside the container; the same policy fixes the repository through it."""
    completions = solve("smolagents", "docker", scoring_model, tmp_path, installed_agent,
                        **{"scaffolds.smolagents.mcp": ["shell"]})
    offered = sorted(t["function"]["name"] for t in completions[0].request["tools"])
    assert offered == ["final_answer", "shell"] and "timeout_s" in json.dumps(completions[0].request["tools"])
    assert "edited" in seen(completions)


@pytest.mark.slow
def test_forge_train_on_smolagents_in_bubblewrap(cli, tiny_model, tmp_path, installed_agent, local_sandbox):
    """``forge train --scaffold smolagents --task swe-mini``: the whole loop on a black-box agent. Its trajectories
    (smolagents in bubblewrap, the scripted policy, the verifier in the sandbox) reach the trainer through the same
    pool, scheduler and prefix tree as a white-box scaffold's; each step's weights go into the engine."""
    from forge_cli.pool.store import DataPool
    from forge_cli.report.metrics import read_metrics

    installed_agent("smolagents")
    sets = {"model.engine.type": "scripted", "model.engine.policy": "forge_cli.tasks.agent_policies:smolagents",
            "rollout.sandbox": "local", "sandboxes.local.isolation": "bwrap", "gateway.port": 0,
            "run.dir": str(tmp_path / "runs"), "train.engine": "torch", "train.groups_per_step": 1,
            "train.group_size": 2, "train.eval_every": 0}
    flags = [part for key, value in sets.items() for part in ("--set", f"{key}={value}")]
    done = cli(*flags, "train", "--no-live", "--run", "smol", "--model", str(tiny_model), "--scaffold", "smolagents",
               "--task", "swe-mini", "--steps", "2", "--warmstart", "never")
    assert done.exit_code == 0, done.stdout + done.stderr
    run = tmp_path / "runs" / "smol"
    steps = read_metrics(run).steps  # the records the loop wrote
    assert [(s.step, s.policy_version) for s in steps] == [(1, 1), (2, 2)]  # trained, swapped into the engine
    assert all(s.success_by_suite == {"swe-mini": 1.0} and s.groups == 1 for s in steps)
    # two draws of one task share smolagents' ~1,900-token first prompt: the prefix tree trains it once
    assert all(s.tokens > 1.5 * s.unique_tokens > 0 for s in steps)
    assert all(s.samples >= 2 * 3 and s.loss == s.loss for s in steps)  # three calls a draw; no NaN
    pool = DataPool.sqlite(run / "pool.sqlite")
    consumed = [g for g in pool.groups() if g.status.value == "consumed"]
    assert {g.id for g in consumed} == {gid for s in steps for gid in s.group_ids}
    for group in consumed:
        trajectories = [pool.trajectory(t.id) for t in group.trajectories]
        assert len(trajectories) == 2 and all(t.scaffold == "smolagents" and t.rewards.get("outcome") == 1.0
                                              for t in trajectories)
        assert all(c.output_ids and c.advantage is not None for t in trajectories for c in t.completions)
    pool.close()


# ---- openai-agents: the Agents SDK over the Responses API, a shell function tool, tracing off -------------


@pytest.mark.slow
def test_openai_agents_local(scoring_model, tmp_path, installed_agent, local_sandbox):
    completions = solve("openai-agents", "local", scoring_model, tmp_path, installed_agent)
    assert all("input" in c.request for c in completions) and "edited" in seen(completions)


@pytest.mark.slow
def test_openai_agents_docker_with_mcp_shell(scoring_model, tmp_path, installed_agent, docker_sandbox):
    """``mcp = ["shell"]``: no built-in tool; the agent's only tool is Forge's shell MCP server's, which the
    runner starts over stdio inside the container (from the servers' venv under FORGE_HOME/agents, as
    Forge's --mcp-config says); the same policy fixes the repository through it."""
    completions = solve("openai-agents", "docker", scoring_model, tmp_path, installed_agent,
                        **{"scaffolds.openai-agents.mcp": ["shell"]})
    offered = [t["name"] for t in completions[0].request["tools"]]
    assert offered == ["shell"] and "timeout_s" in json.dumps(completions[0].request["tools"])  # the server's schema
    assert "edited" in seen(completions)

# ---- aider: chat completions without tools; the files in its prompt, whole-file edits in its reply --------


@pytest.mark.slow
def test_aider_local(scoring_model, tmp_path, installed_agent, local_sandbox):
    completions = solve("aider", "local", scoring_model, tmp_path, installed_agent, least=1)
    assert "tools" not in completions[0].request and "READ ONLY files" in seen(completions)


@pytest.mark.slow
def test_aider_docker(scoring_model, tmp_path, installed_agent, docker_sandbox):
    solve("aider", "docker", scoring_model, tmp_path, installed_agent, least=1)

# ---- forge scaffold show: the first prompt's length on the current model, measured once and cached -------


@pytest.mark.slow
def test_scaffold_show_measures_the_first_prompt_once(cli, tiny_model, tmp_path, installed_agent):
    from forge_cli.rollout import first_prompt
    from forge_cli.rollout.blackbox import run_blackbox
    from forge_cli.tasks.suites import resolve_suite
    from forge_cli.plugins import get_registry
    from tests.test_blackbox import Live

    spec = installed_agent("smolagents")
    first_prompt.cache_path().unlink(missing_ok=True)  # the agents' FORGE_HOME is the session's

    def show(*flags: str) -> dict:
        done = cli("--set", f"model.path={tiny_model}", "scaffold", "show", "smolagents", "--json", *flags)
        assert done.exit_code == 0, done.stderr
        return json.loads(done.stdout)["first_prompt"]

    measured = show()
    assert measured["cached"] is False and measured["context"] == 65536
    entry, = json.loads(first_prompt.cache_path().read_text()).values()
    assert entry["tokens"] == measured["tokens"]
    again = show()
    assert again["cached"] is True and again["tokens"] == measured["tokens"]  # read back, not measured again
    # the same agent on the same task through another gateway: its first completion is that long
    suite, split, seed = first_prompt.MEASURE_TASK
    task = resolve_suite(suite, None, get_registry()).make(split, 1, seed)[0]
    live = Live(tiny_model, tmp_path, ["Done."])
    try:
        session = live.session("smolagents")
        asyncio.run(run_blackbox(spec, base_url=f"{live.url}/v1", api_key=session["api_key"], model="forge",
                                 task=task, workdir=tmp_path / "work", timeout_s=120))
        assert len(live.completions(session)[0].prompt_ids) == measured["tokens"]
    finally:
        live.close()
    fresh = show("--remeasure")
    assert fresh["cached"] is False and fresh["tokens"] == measured["tokens"]
    assert cli("scaffold", "show", "codex", "--json").exit_code == 0  # not installed: said, not measured

# ---- the untrained default model on a real vLLM engine: failed trajectories, in time, nothing left -------

UNTRAINED_BUDGET_S = 40.0
NPM_AGENTS = ("opencode", "codex", "claude-code")


@pytest.mark.slow
def test_the_untrained_model_fails_cleanly_in_all_seven_agents(tiny_model, tmp_path, installed_agent, docker_sandbox):
    """All seven agents at once, in docker, against one vLLM engine sampling from the untrained default model
    (65,536 positions: the npm agents' 10-32k-token first prompts fit): none crashes the rollout or hangs past
    its budget (40 s, 512 output tokens a trajectory); no prompt is refused as too long; the tasks stay
    unsolved; no container or process is left."""
    from forge_cli.gateway.server import serve_gateway

    pytest.importorskip("vllm", reason="the vLLM engine is not installed")
    import psutil  # a dependency of vLLM's
    positions = json.loads((Path(tiny_model) / "config.json").read_text())["max_position_embeddings"]
    assert positions >= 65536, f"the default model has {positions} positions: claude-code's first prompt needs ~32k"
    agents = (*POLICIES, *NPM_AGENTS)
    for name in agents:
        installed_agent(name)
    config = configure(tiny_model, tmp_path, "docker", None, **{"model.engine.type": "vllm"})
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    ended: dict[str, tuple[list[str], float]] = {}
    codes: dict[tuple[str, str], float] = {}  # the gateway's requests by endpoint and HTTP status

    async def one(gw: Any, name: str) -> None:
        request = RolloutRequest(scaffold=name, suite="swe-mini", groups=1, n=1, concurrency=1,
                                 trajectory_timeout_s=UNTRAINED_BUDGET_S, max_tokens_per_trajectory=512)
        started = time.monotonic()
        summary = await rollout(config, request, gateway=gw)
        ended[name] = ([k for k, v in summary.by_status.items() for _ in range(v)], time.monotonic() - started)
        assert summary.success_rate == 0.0, name

    async def go() -> None:
        async with serve_gateway(config, "untrained") as gw:
            await asyncio.gather(*(one(gw, name) for name in agents))
            for metric in gw.state.metrics.requests.collect():
                codes.update({(s.labels["endpoint"], s.labels["status"]): s.value for s in metric.samples
                                 if s.name.endswith("_total")})

    asyncio.run(go())
    print({name: (statuses, f"{took:.1f} s") for name, (statuses, took) in ended.items()}, codes)
    assert sorted(ended) == sorted(agents)
    # every agent's prompts fit the model's context: none was refused (a prompt past it is a 400)
    assert codes and not [key for key in codes if key[1] == "400"], codes
    for name, (statuses, took) in ended.items():
        # none hangs past its budget: a trajectory that reached it is timed_out (how long the verifier and
        # teardown took after it is the machine's business: printed above, not asserted)
        assert len(statuses) == 1 and set(statuses) <= {"completed", "failed", "timed_out"}, (name, statuses)
    # vLLM's engine process takes a moment to exit after the gateway closed; multiprocessing's resource
    # tracker lives as long as this interpreter
    new = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    _, alive = psutil.wait_procs(new, timeout=30)
    left = [" ".join(p.cmdline()) for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert [c for c in left if "multiprocessing.resource_tracker" not in c] == []
