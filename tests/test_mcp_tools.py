"""White-box tools from MCP servers running inside a sandbox (forge_cli/rollout/mcp_tools.py): the
scaffold option checked against the table of shipped servers, schemas from list_tools, calls through
call_tool, MCP errors and crashed servers as tool errors the agent sees, and the proof: a white-box
scaffold solves files tasks through a real gateway using only tools served over MCP from a sandbox."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from forge_cli.records.session import SessionRequest
from forge_cli import plugins
from forge_cli.errors import ForgeError
from forge_cli.rollout.loop import Episode
from forge_cli.rollout.mcp_tools import SERVERS, episode_tools, mcp_servers, mcp_tools, tools_dir
from forge_cli.sandbox.local import LocalSandbox
from tests.conftest import LiveGateway
from tests.docker_support import docker_engine  # noqa: F401  (a fixture)


def _run(coro):
    return asyncio.run(coro)


def _episode(tools) -> Episode:
    spec = plugins.get_registry().scaffold("tool-call")
    return Episode(scaffold=spec, base_url="http://127.0.0.1:9/v1", api_key="k", prompt="p", options=None, tools=tools)


def _in_workdir(workdir: Path) -> list[int]:
    """Processes (not this one) whose working directory is ``workdir`` — the same folder, whatever path
    their sandbox shows it at (bubblewrap: /forge/work): what a sandbox started there."""
    here = os.stat(workdir)
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                cwd = os.stat(f"/proc/{name}/cwd")
            except OSError:
                continue
            if (cwd.st_dev, cwd.st_ino) == (here.st_dev, here.st_ino):
                found.append(int(name))
    return found


# ---- the scaffold option ----------------------------------------------------------------------------------


def test_every_white_box_scaffold_takes_an_mcp_option_checked_against_the_shipped_servers():
    registry = plugins.get_registry()
    white = [s for s in registry.scaffolds.values() if s.value.kind == "white"]
    assert white and all("mcp" in s.value.options.model_fields for s in white)
    options = registry.options_for("scaffolds", "tool-call", {"mcp": ["files", "shell"]}, "forge.toml")
    assert options.mcp == ["files", "shell"] and mcp_servers(options) == ["files", "shell"]
    assert registry.options_for("scaffolds", "react-summarize", {}, "forge.toml").mcp == []
    with pytest.raises(ForgeError, match=r"forge.toml \[scaffolds.tool-call\]: mcp.1: Input should be 'shell', 'files' or 'search'"):
        registry.options_for("scaffolds", "tool-call", {"mcp": ["files", "web"]}, "forge.toml")
    with pytest.raises(ForgeError, match="unknown MCP server 'web': choose from shell, files, search"):
        mcp_servers({"mcp": ["web"]})
    assert set(SERVERS) == {"shell", "files", "search"}
    assert all((tools_dir() / s.script).is_file() for s in SERVERS.values())


def test_without_mcp_an_episode_keeps_the_suites_own_tools(tmp_path):
    from forge_cli.tasks.files import files_suite

    suite = files_suite()
    task = suite.make("train", 1, 0)[0]

    async def tools_of():
        async with episode_tools({}, suite, task, tmp_path, lambda: pytest.fail("no sandbox is opened")) as tools:
            return [t.name for t in tools]

    assert _run(tools_of()) == ["read_file", "write_file", "list_files"]


# ---- tools over MCP, from inside a sandbox --------------------------------------------------------------


def test_tools_are_listed_by_the_servers_and_called_inside_the_sandbox(tmp_path):
    workdir = tmp_path / "work"

    async def session():
        async with LocalSandbox(workdir) as sandbox:
            async with mcp_tools(["files", "shell"], sandbox) as tools:
                by_name = {t.name: t for t in tools}
                wrote = await by_name["write_file"].run({"path": "notes/a.txt", "content": "one\r\ntwo\n"})
                edited = await by_name["edit_file"].run({"path": "notes/a.txt", "old": "two", "new": "three"})
                ran = await by_name["shell"].run({"command": 'pwd; echo "$HOME"; cat notes/a.txt'})
                running = _in_workdir(workdir)
            return tools, wrote, edited, ran, running, (sandbox.view_workdir, sandbox.view_home)

    tools, wrote, edited, ran, running, (seen_workdir, home) = _run(session())
    assert [t.name for t in tools] == ["read_file", "write_file", "edit_file", "list_files", "shell"]
    schemas = {t.name: t.schema()["function"] for t in tools}
    assert schemas["edit_file"]["parameters"]["required"] == ["path", "old", "new"]  # the server's input schema
    assert "exact text" in schemas["edit_file"]["description"] and schemas["shell"]["parameters"]["properties"]["timeout_s"]
    assert wrote == "wrote 9 characters to notes/a.txt" and edited == "replaced 1 occurrence in notes/a.txt"
    assert (workdir / "notes" / "a.txt").read_bytes() == b"one\r\nthree\n"
    # the shell ran in the sandbox: its work directory, the sandbox's own HOME (its clean environment), as it shows them
    assert ran == f"{seen_workdir}\n{home}\none\r\nthree\n[exit code 0]"
    assert running  # the servers ran there while the episode did ...
    assert _in_workdir(workdir) == []  # ... and nothing is left once it ended


def test_an_mcp_error_is_a_tool_error_the_agent_sees(tmp_path):
    async def session():
        async with LocalSandbox(tmp_path / "work") as sandbox:
            async with mcp_tools(["files"], sandbox) as tools:
                episode = _episode(tools)
                outside = await episode.call_tool("read_file", {"path": "../secret"})
                missing = await episode.call_tool("edit_file", {"path": "none.txt", "old": "a", "new": "b"})
                not_an_object = await episode.call_tool("list_files", "[1, 2]")
                listed = await episode.call_tool("list_files", {})
                return outside, missing, not_an_object, listed, episode.events

    outside, missing, not_an_object, listed, events = _run(session())
    assert outside == "error: ForgeError: Error executing tool read_file: '../secret' is outside the working folder"
    assert missing == "error: ForgeError: Error executing tool edit_file: no file 'none.txt'"
    assert not_an_object.startswith("error: ForgeError: the arguments of list_files must be a JSON object")
    assert listed == "(no files)"
    assert [e.kind for e in events] == ["tool.error"] * 3 and events[0].data["name"] == "read_file"


def test_a_server_that_crashes_mid_run_is_a_tool_error_and_the_episode_goes_on(tmp_path):
    workdir = tmp_path / "work"

    async def session():
        async with LocalSandbox(workdir) as sandbox:
            async with mcp_tools(["shell", "files"], sandbox) as tools:
                episode = _episode(tools)
                crashed = await episode.call_tool("shell", {"command": "echo bye >&2; kill -9 $PPID; sleep 5"})
                again = await episode.call_tool("shell", {"command": "echo still there?"})
                other = await episode.call_tool("write_file", {"path": "after.txt", "content": "the files server lives"})
                return crashed, again, other, episode.events

    crashed, again, other, events = _run(session())  # leaving the block raised nothing
    assert crashed.startswith("error: ForgeError: the MCP server 'shell' stopped answering")
    assert again == crashed  # every later call says the same, at once
    assert other == "wrote 22 characters to after.txt"
    assert [e.kind for e in events] == ["tool.error", "tool.error"]
    assert _in_workdir(workdir) == []


def test_a_server_that_cannot_start_fails_with_its_reason(tmp_path, monkeypatch):
    from forge_cli.rollout import mcp_tools as module

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "files_server.py").write_text("raise SystemExit('no MCP SDK in this sandbox')\n")
    monkeypatch.setattr(module, "tools_dir", lambda: broken)  # the seam: the scripts copied into the sandbox

    async def session():
        async with LocalSandbox(tmp_path / "work") as sandbox:
            async with mcp_tools(["files"], sandbox, start_timeout_s=30):
                pytest.fail("it started")

    with pytest.raises(ForgeError, match=r"the MCP server 'files' did not start in the sandbox \(.*\): no MCP SDK in this sandbox"):
        _run(session())


def test_search_serves_a_kv_search_tasks_corpus_from_inside_the_sandbox(tmp_path):
    from forge_cli.tasks import kvsearch

    suite = kvsearch.kv_search_suite()
    task = suite.make("train", 1, 5)[0]
    corpus = kvsearch.corpus_of(task)
    own = {t.name: t for t in suite.tools(task, tmp_path)}
    entity = corpus.chain[0]

    async def session():
        async with LocalSandbox(tmp_path / "work") as sandbox:
            async with mcp_tools(["search"], sandbox, task=task) as tools:
                by_name = {t.name: t for t in tools}
                doc = corpus.by_entity(entity)
                written = len(list((tmp_path / "work" / ".forge-corpus").glob("doc-*.txt")))
                return await by_name["search"].run({"query": entity}), await by_name["open"].run({"doc_id": doc.id}), written

    found, opened, written = _run(session())
    assert found.split("\n\n")[0] == own["search"].run({"query": entity}).split("\n\n")[0]
    assert opened == own["open"].run({"doc_id": corpus.by_entity(entity).id})
    assert written == len(corpus.documents)  # the task's corpus, in the sandbox while the servers ran ...
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == []  # ... and nothing of Forge's left after


# ---- the proof: a files task solved with only MCP tools, through a real gateway ------------------------------


def _call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def files_over_mcp(context: dict[str, Any]) -> str:
    """A scripted policy for ``files`` tasks that works only with the files MCP server's tools: it
    reads what it needs, then writes or edits (``edit_file`` for a settings change), then says done."""
    messages = context.get("messages") or []
    offered = {t.get("function", t).get("name") for t in context.get("tools") or []}
    if "edit_file" not in offered:
        return "I was given no edit_file tool."
    prompt = next(str(m["content"]) for m in messages if m.get("role") == "user")
    seen = [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]
    step = len(seen)
    if m := re.search(r"Create a file named (\S+) containing exactly this line: (.+)$", prompt):
        return _call("write_file", path=m.group(1), content=m.group(2).strip() + "\n") if step == 0 else "done"
    if m := re.search(r"In (\S+), change the value of (\w+) to (\S+?);", prompt):
        path, key, value = m.groups()
        if step == 0:
            return _call("read_file", path=path)
        if step == 1:
            old = re.search(rf"^{key} = .*$", seen[0], re.M).group(0)
            return _call("edit_file", path=path, old=old, new=f"{key} = {value}")
        return "done"
    if m := re.search(r"Make a copy of (\S+) named (\S+) with every letter in upper case", prompt):
        source, target = m.groups()
        steps = [lambda: _call("read_file", path=source), lambda: _call("write_file", path=target, content=seen[0].upper())]
    elif "numbers.txt" in prompt:
        steps = [lambda: _call("read_file", path="numbers.txt"),
                 lambda: _call("write_file", path="total.txt", content=f"{sum(int(x) for x in seen[0].split())}\n")]
    elif "names.txt" in prompt:
        steps = [lambda: _call("read_file", path="names.txt"),
                 lambda: _call("write_file", path="names.txt", content="\n".join(sorted(seen[0].split())) + "\n"),
                 lambda: _call("write_file", path="count.txt", content=f"{len(seen[0].split())}\n")]
    else:
        steps = []
    if steps:
        return steps[step]() if step < len(steps) else "done"
    return "I cannot tell what is asked."


@pytest.mark.slow
def test_a_white_box_scaffold_solves_files_tasks_with_only_tools_served_over_mcp_from_a_sandbox(tiny_model, tmp_path):
    from forge_cli.engine.scripted import ScriptedEngine
    from forge_cli.gateway.state import GatewayState
    from forge_cli.pool.store import DataPool
    from forge_cli.rollout.loop import run_episode
    from forge_cli.tasks.files import files_suite
    from forge_cli.tasks.types import Transcript
    from forge_cli.tasks.workdir import seed_workdir

    registry = plugins.get_registry()
    suite = files_suite()
    tasks = {t.meta["kind"]: t for t in suite.make("train", 60, 1)}
    assert set(tasks) == {"create", "edit", "sum", "upper", "sort"}
    engine = ScriptedEngine(tiny_model, files_over_mcp)
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, {n: e.value for n, e in registry.tool_formats.items()}, pool=pool,
                         admin_key="admin")
    live = LiveGateway(state)
    spec = registry.scaffold("tool-call")
    options = {"mcp": ["files"], "max_turns": 6}

    async def solve(task):
        workdir = tmp_path / "work" / task.id
        workdir.mkdir(parents=True)
        seed_workdir(task, workdir)
        session = await state.create_session(SessionRequest(task_id=task.id, scaffold=spec.name, tool_format=spec.tool_format,
                                                                  training=True))
        async with episode_tools(options, suite, task, workdir, lambda: LocalSandbox(workdir)) as tools:
            result = await run_episode(spec, base_url=f"{live.url}/v1", api_key=session.api_key, prompt=task.prompt,
                                       options=options, tools=tools, registry=registry)
        outcome = suite.verifier.verify(task, workdir, Transcript(answer=result.answer))
        return session.trajectory_id, result, outcome, workdir

    try:
        for kind, task in tasks.items():
            trajectory_id, result, outcome, workdir = _run(solve(task))
            assert outcome.solved, (kind, outcome.reason, result)
            assert result.answer == "done" and result.events == []
            completions = pool.trajectory(trajectory_id).completions
            prompts = [engine.tokenizer.decode(c.prompt_ids) for c in completions]
            assert all("replace_all" in p for p in prompts)  # the MCP server's schemas were what the model saw
            if kind == "edit":
                said = engine.tokenizer.decode(completions[1].output_ids)
                assert '"name": "edit_file"' in said and "replaced 1 occurrence in settings.ini" in prompts[2]
            assert _in_workdir(workdir) == []
    finally:
        live.stop()
        pool.close()


@pytest.mark.slow
def test_a_rollout_of_a_white_box_scaffold_with_only_mcp_tools_is_verified_as_solved(tiny_model, tmp_path):
    mcp_rollout(tiny_model, tmp_path, {"gateway.socket": ""}, groups=3)


def test_in_a_container_the_servers_run_from_their_own_venv(tiny_model, tmp_path, docker_engine):  # noqa: F811
    """The docker sandbox's python3 has no mcp SDK and cannot see Forge's venv: the servers run on the venv of
    $FORGE_HOME/agents (made on first use, mounted read-only like the agents), and the rollout is solved."""
    from tests.docker_support import sandbox_containers

    mcp_rollout(tiny_model, tmp_path, {"rollout.sandbox": "docker"}, groups=1)
    assert [c for c in sandbox_containers(docker_engine) if str(tmp_path) in str(c.attrs.get("Mounts"))] == []


def mcp_rollout(tiny_model, tmp_path, more, *, groups):
    from forge_cli.config import load_config
    from forge_cli.pool.store import DataPool
    from forge_cli.rollout.records import RolloutRequest
    from forge_cli.rollout.driver import rollout

    config = load_config(env={}, overrides={
        "model.path": str(tiny_model), "model.engine.type": "scripted", "model.engine.policy": f"{__name__}:files_over_mcp",
        "gateway.port": 0, "run.dir": str(tmp_path / "runs"),
        "scaffolds.tool-call.mcp": ["files"], "scaffolds.tool-call.max_turns": 6, **more})
    request = RolloutRequest(scaffold="tool-call", suite="files", groups=groups, n=1, concurrency=1, seed=4)
    summary = _run(rollout(config, request, run="r"))
    assert summary.trajectories == groups and summary.success_rate == 1.0
    pool = DataPool.sqlite(tmp_path / "runs" / "r" / "pool.sqlite")
    try:
        trajectories = [pool.trajectory(t.id) for g in pool.groups() for t in g.trajectories]
        assert all(t.status == "completed" and t.rewards["outcome"] == 1 for t in trajectories)
        assert all("replace_all" in str(c.request) or c.request is None for t in trajectories for c in t.completions)
    finally:
        pool.close()
    assert list((tmp_path / "runs" / "r" / "work").glob("*/.forge-*")) == []
