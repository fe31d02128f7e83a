"""The npm black-box agents (opencode, codex, claude-code), installed by `forge scaffold add`, fix a swe-mini
repository end to end inside each sandbox backend: a rollout with the scripted engine and a policy that answers
in the agent's own tool protocol (forge_cli.tasks.agent_policies), the agent's own tools — or, in the tests named
``…_with_mcp_files``, Forge's files MCP server started by the agent from its own MCP configuration — editing the file
in its sandbox, the swe-mini verifier running the tests there, and every recorded completion's prompt ids exactly the
chat template's rendering of the request the agent sent."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.conftest import tool_formats
from tests.docker_support import docker_engine, sandbox_containers  # noqa: F401  (a fixture)

# the tool each agent edits with, as its policy calls it
EDIT_TOOL = {"opencode": "edit", "codex": "exec_command", "claude-code": "Edit"}


def rerendered(api: str, raw: dict, tokenizer, fmt) -> str:
    """The chat template's rendering of a recorded request, through the gateway's own request models."""
    from forge_cli.gateway.protocol.anthropic import MessagesRequest
    from forge_cli.gateway.protocol.openai_chat import ChatCompletionRequest, NamedToolChoice
    from forge_cli.gateway.protocol.responses import ResponsesRequest
    from forge_cli.gateway.render import Tool, render_prompt
    from forge_cli.gateway.routes import chat, messages, responses

    if api == "openai-chat":
        req = ChatCompletionRequest.model_validate(raw)
        tools = [Tool(t.function.name, t.function.description or "", t.function.parameters or
                      {"type": "object", "properties": {}}) for t in (req.tools or [])]
        choice = req.tool_choice if isinstance(req.tool_choice, str) else None
        forced = req.tool_choice.function.name if isinstance(req.tool_choice, NamedToolChoice) else None
        turns = chat.to_turns(req.messages)
    elif api == "openai-responses":
        req = ResponsesRequest.model_validate(raw)
        tools = responses.to_tools(req)[0]
        choice = req.tool_choice if isinstance(req.tool_choice, str) else None
        forced = req.tool_choice.get("name") if isinstance(req.tool_choice, dict) else None
        turns = responses.to_turns(req)
    else:
        req = MessagesRequest.model_validate(raw)
        tools = messages.to_tools(req)
        choice, forced = messages._tool_choice(req, tools)
        turns = messages.to_turns(req)
    return render_prompt(tokenizer, turns, tools, fmt, tool_choice=choice, forced_tool=forced).text


def fix_swe_mini(name: str, backend: str, model: Path, tmp_path: Path, mcp: list[str] | None = None,
                 edit_tool: str | None = None) -> list:
    """`forge rollout --scaffold NAME --task swe-mini --sandbox BACKEND` with the scripted engine and NAME's policy,
    through rollout(); checks the verified fix, the agent's own edit call (``edit_tool``: the name it offers an
    MCP server's tool under, with ``mcp = [...]`` set) and the exact tokens; the completions."""
    from forge_cli.config import load_config
    from forge_cli.engine.hf import score
    from forge_cli.gateway.server import serve_gateway
    from forge_cli.rollout.records import RolloutRequest
    from forge_cli.rollout.driver import rollout
    from forge_cli.tasks.agent_policies import NPM_AGENT_POLICIES

    config = load_config(env={}, overrides={
        "model.path": str(model), "model.engine.type": "scripted",
        "model.engine.policy": f"forge_cli.tasks.agent_policies:{NPM_AGENT_POLICIES[name]}",
        "gateway.port": 0, "run.dir": str(tmp_path / "runs"), "rollout.sandbox": backend,
        **({"sandboxes.local.isolation": "bwrap"} if backend == "local" else {}),  # isolated, or an error
        **({f"scaffolds.{name}.mcp": mcp} if mcp else {})})
    request = RolloutRequest(scaffold=name, suite="swe-mini", groups=1, n=1, trajectory_timeout_s=240)

    async def go():
        async with serve_gateway(config, "r") as gw:
            gw.state.record_requests = True  # the seam: keep each request, to render it again here
            summary = await rollout(config, request, gateway=gw)
            return summary, gw.run.engine, gw.pool.groups()

    summary, engine, groups = asyncio.run(go())
    from forge_cli.pool.store import DataPool

    pool = DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")
    try:
        (trajectory,) = [pool.trajectory(t.id) for g in groups for t in g.trajectories]
        assert trajectory.status == "completed", trajectory.error
        assert trajectory.rewards["outcome"] == 1.0  # the verifier ran the tests in the sandbox: all pass, unchanged
        assert summary.success_rate == 1.0
        calls = trajectory.completions
        texts = [engine.tokenizer.decode(c.output_ids) for c in calls]
        if mcp:  # the agent waited for the server: its first request with tools already offers the server's
            first = next(c for c in calls if (c.request or {}).get("tools"))  # (opencode's title request has none)
            assert "edit_file" in json.dumps(first.request["tools"]), first.request["tools"]
        exits = [e.data for e in trajectory.events if e.kind == "agent-exit"]
        offered = [sorted(t.get("name") or t.get("function", {}).get("name") or t.get("type", "?")
                          for t in (c.request or {}).get("tools") or []) for c in calls]
        assert any(f'"name": "{edit_tool or EDIT_TOOL[name]}"' in t for t in texts), (texts, offered, exits)
        assert texts[-1].startswith("Fixed: the tests pass.")
        spec_api = {"opencode": "openai-chat", "codex": "openai-responses", "claude-code": "anthropic-messages"}[name]
        formats = tool_formats()
        for c in calls:  # decode(prompt_ids) is the template's rendering of the request the agent sent
            assert c.request is not None
            assert engine.tokenizer.decode(c.prompt_ids) == rerendered(spec_api, c.request, engine.tokenizer,
                                                                       formats[c.tool_format])
            assert len(c.output_logprobs) == len(c.output_ids) > 0
        shortest = min(calls, key=lambda c: len(c.prompt_ids))  # the logprobs are the model's for those ids
        again, _ = score(engine.model, list(shortest.prompt_ids), list(shortest.output_ids),
                         shortest.sampling.temperature, None)
        assert again == pytest.approx(list(shortest.output_logprobs), abs=1e-4)
        return calls
    finally:
        pool.close()


@pytest.fixture
def docker_ready(docker_engine):  # noqa: F811
    yield docker_engine
    assert sandbox_containers(docker_engine) == []  # nothing left behind


@pytest.mark.slow
def test_opencode_local_with_mcp_files(installed_agent, scoring_model, tmp_path, local_sandbox):
    """opencode in bubblewrap with ``mcp = ["files"]``: the server in its opencode.json (``type = "local"``),
    offered as ``files_read_file`` / ``files_edit_file``, through which the policy reads and edits."""
    installed_agent("opencode")
    calls = fix_swe_mini("opencode", "local", scoring_model, tmp_path, mcp=["files"], edit_tool="files_edit_file")
    assert {"files_read_file", "files_edit_file"} <= {t["function"]["name"] for t in calls[-1].request["tools"]}


@pytest.mark.slow
def test_opencode_docker(installed_agent, scoring_model, tmp_path, docker_ready):
    installed_agent("opencode")
    fix_swe_mini("opencode", "docker", scoring_model, tmp_path)


@pytest.mark.slow
def test_codex_local(installed_agent, scoring_model, tmp_path, local_sandbox):
    installed_agent("codex")
    fix_swe_mini("codex", "local", scoring_model, tmp_path)


@pytest.mark.slow
def test_codex_docker_with_mcp_files(installed_agent, scoring_model, tmp_path, docker_ready):
    """codex in a container with ``mcp = ["files"]``: ``[mcp_servers.files]`` in its config.toml, required,
    so codex waits for the server; it sends the server's tools in an ``mcp__files`` namespace (rendered as
    ``read_file``, ``edit_file``) from its first request, and the policy edits through them."""
    installed_agent("codex")
    calls = fix_swe_mini("codex", "docker", scoring_model, tmp_path, mcp=["files"], edit_tool="edit_file")
    spaces = {t["name"]: t for t in calls[-1].request["tools"] if t.get("type") == "namespace"}
    assert {"read_file", "edit_file"} <= {t["name"] for t in spaces["mcp__files"]["tools"]}


@pytest.mark.slow
def test_claude_code_local_with_mcp_files(installed_agent, scoring_model, tmp_path, local_sandbox):
    """claude-code in bubblewrap with ``mcp = ["files"]``: Forge writes its --mcp-config, claude-code starts
    the files server in its sandbox and reads and edits the repository only through it
    (``mcp__files__read_file``, ``mcp__files__edit_file``). One claude-code fix, ~70 s with its ~135k tokens
    scored: claude-code in docker is only launched, and fails cleanly, in test_agents_pip's untrained seven; the
    MCP servers' own venv in a container is codex's docker test above; claude-code without MCP is not run."""
    installed_agent("claude-code")
    calls = fix_swe_mini("claude-code", "local", scoring_model, tmp_path, mcp=["files"], edit_tool="mcp__files__edit_file")
    offered = {t["name"] for t in calls[-1].request["tools"]}
    assert {"mcp__files__read_file", "mcp__files__edit_file", "mcp__files__write_file"} <= offered
    assert "mcp__files__read_file" in json.dumps([c.request for c in calls])
