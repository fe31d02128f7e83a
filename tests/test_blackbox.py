"""run_blackbox: real agent programs launched from a scaffold's recipe in the local sandbox, talking to a
real gateway on 127.0.0.1 (the scripted engine over the tiny model, with a pool)."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from forge_cli import installer, plugins
from forge_cli.engine.scripted import FilePolicy, ScriptedEngine
from forge_cli.errors import ForgeError
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from forge_cli.rollout.blackbox import BlackboxResult, run_blackbox
from forge_cli.specs import ANSWER_RULES, LAUNCH_PLACEHOLDERS, InstallRecipe, LaunchSpec, ScaffoldSpec
from forge_cli.tasks.types import Task, Transcript
from tests.conftest import LiveGateway, tool_formats
from tests.test_sandbox_local import wait_dead
from tests.waiting import wait_until

AGENT = '''
import json, os, subprocess, sys, time
from openai import OpenAI

mode, model, prompt = sys.argv[1], sys.argv[2], sys.argv[3]
client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
notes = open("notes.txt").read()
messages = [{"role": "user", "content": prompt + "\\n" + notes}]
first = client.chat.completions.create(model=model, messages=messages, max_tokens=8)
print("first:", first.choices[0].message.content, flush=True)
if mode == "args":
    print("ARGS", sys.argv[4:], os.environ.get("TOY_EXTRA"), flush=True)
if mode == "crash":
    raise RuntimeError("the agent broke after its first call")
if mode == "hang":
    child = subprocess.Popen(["sleep", "300"])
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    open("pids.json", "w").write(json.dumps([os.getpid(), child.pid, daemon.pid]))
    time.sleep(300)
if mode == "memory":
    hog = bytearray(8 * 1024**3)
messages += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "go on"}]
second = client.chat.completions.create(model=model, messages=messages, max_tokens=8)
open("answer.txt", "w").write(second.choices[0].message.content)
print("done")
'''


class Live:
    """A gateway with a pool on 127.0.0.1 and a way to open a trajectory's session over HTTP."""

    def __init__(self, tiny_model, tmp_path: Path, turns: list[str]) -> None:
        self.engine = ScriptedEngine(tiny_model, FilePolicy({"turns": turns}))
        self.pool = DataPool.sqlite(tmp_path / "pool.sqlite")
        self.live = LiveGateway(GatewayState(self.engine, self.engine.tokenizer, tool_formats(), pool=self.pool,
                                             admin_key="admin"))
        self.url = self.live.url

    def session(self, scaffold: str) -> dict:
        return httpx.post(f"{self.url}/admin/sessions", headers={"Authorization": "Bearer admin"},
                          json={"task_id": "t", "scaffold": scaffold}).json()

    def completions(self, session: dict) -> list:
        return self.pool.trajectory(session["trajectory_id"]).completions

    def decode(self, ids: list[int]) -> str:
        return self.engine.tokenizer.decode(ids)

    def close(self) -> None:
        self.live.stop()
        self.pool.close()


@pytest.fixture
def gateway(tiny_model, tmp_path):
    live = Live(tiny_model, tmp_path, ["Sure, working.", "All finished."])
    yield live
    live.close()


def toy_spec(tmp_path: Path, mode: str, *, command: tuple[str, ...] | None = None, answer: str = "file:answer.txt",
             name: str = "toy-agent") -> ScaffoldSpec:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    spec = ScaffoldSpec(
        name=name, kind="black", description="a small agent program written by the test",
        install=InstallRecipe(manager="pip", package="toy-agent", version="==1.0", bin="python"),
        launch=LaunchSpec(command=command or ("$python", str(agent), mode, "$model", "$prompt"),
                          env={"OPENAI_BASE_URL": "$base_url", "OPENAI_API_KEY": "$api_key"}, answer=answer),
    )
    spec.validate()
    return spec


def fake_install(spec: ScaffoldSpec, agents_home: Path | None = None) -> None:
    """Record ``spec`` as installed with this interpreter as its program (the installer's marker, by hand:
    what this file tests is the launch, not pip)."""
    prefix = (agents_home or installer.agents_dir()) / spec.name
    prefix.mkdir(parents=True, exist_ok=True)
    assert spec.install is not None
    (prefix / installer.MARKER).write_text(json.dumps({
        "requirement": installer._requirement_key(spec.install), "version": "1.0", "bin": sys.executable,
        "installed_at": time.time()}))


TASK = Task(id="toy-1", suite="files", prompt="Say something.", files={"notes.txt": "the notes of the task"})


def launch(gateway: Live, spec: ScaffoldSpec, tmp_path: Path, session: dict, *, timeout_s: float = 60,
           task: Task = TASK, **kw) -> BlackboxResult:
    return asyncio.run(run_blackbox(spec, base_url=f"{gateway.url}/v1", api_key=session["api_key"], model="forge",
                                    task=task, workdir=tmp_path / "work", timeout_s=timeout_s, **kw))


def test_an_agent_that_finishes_is_completed_with_its_calls_recorded(gateway, tmp_path):
    spec = toy_spec(tmp_path, "ok")
    fake_install(spec)
    session = gateway.session(spec.name)
    result = launch(gateway, spec, tmp_path, session)
    assert result.status == "completed" and result.exit_code == 0, result
    assert result.reason == "exited 0"
    assert result.answer == "All finished."
    assert result.stdout == "first: Sure, working.\ndone\n"
    assert session["api_key"] not in " ".join(result.command) and "***" not in result.command[0]
    assert result.transcript() == Transcript(answer="All finished.", exit_code=0, stdout=result.stdout)
    completions = gateway.completions(session)
    assert [c.seq for c in completions] == [0, 1]
    # the task's prompt and its files reached the agent, and its first reply came back to it
    first, second = (gateway.decode(c.prompt_ids) for c in completions)
    assert "Say something.\nthe notes of the task" in first
    assert "Sure, working." in second and "go on" in second
    assert gateway.decode(completions[1].output_ids).startswith("All finished.")
    assert (tmp_path / "work" / "notes.txt").read_text() == "the notes of the task"


def test_a_session_base_url_and_an_answer_on_stdout(gateway, tmp_path):
    spec = toy_spec(tmp_path, "ok", answer="last-line")
    fake_install(spec)
    session = gateway.session(spec.name)
    result = asyncio.run(run_blackbox(spec, base_url=session["base_url"], api_key="ignored-by-the-url",
                                      model="forge", task=TASK, workdir=tmp_path / "work", timeout_s=60))
    assert result.status == "completed" and result.answer == "done"
    assert len(gateway.completions(session)) == 2


def test_a_scaffolds_extra_args_env_and_budget_reach_its_launch(gateway, tmp_path):
    from forge_cli.rollout.executors import Job, launch_options

    job = Job(scaffold="toy-agent", suite="files", verifier=None, task=TASK, workdir=str(tmp_path / "work"),
              base_url=f"{gateway.url}/v1", api_key="k", model="forge", timeout_s=120.0,
              options={"extra_args": ["--flag", "x y"], "env": {"TOY_EXTRA": "yes"}, "timeout_s": 45})
    assert launch_options(job) == {"timeout_s": 45.0, "extra_args": ["--flag", "x y"], "extra_env": {"TOY_EXTRA": "yes"},
                                   "mcp": []}
    assert launch_options(Job(**{**job.__dict__, "options": {}}))["timeout_s"] == 120.0  # the trajectory's budget
    assert launch_options(Job(**{**job.__dict__, "options": {"mcp": ["files", "shell", "files"]}}))["mcp"] == ["files", "shell"]
    spec = toy_spec(tmp_path, "args")
    fake_install(spec)
    session = gateway.session(spec.name)
    kwargs = launch_options(job)
    result = asyncio.run(run_blackbox(spec, base_url=f"{gateway.url}/v1", api_key=session["api_key"], model="forge",
                                      task=TASK, workdir=tmp_path / "work", **kwargs))
    assert result.status == "completed", result
    assert "ARGS ['--flag', 'x y'] yes" in result.stdout
    assert list(result.command[-2:]) == ["--flag", "x y"]
    with pytest.raises(ForgeError, match="the agent 'toy-agent' cannot use MCP servers"):  # no MCP support: refused
        asyncio.run(run_blackbox(spec, base_url=f"{gateway.url}/v1", api_key=session["api_key"], model="forge",
                                 task=TASK, workdir=tmp_path / "work", **{**kwargs, "mcp": ["files"]}))


def test_a_crash_after_a_call_is_failed_and_keeps_the_call(gateway, tmp_path):
    spec = toy_spec(tmp_path, "crash")
    fake_install(spec)
    session = gateway.session(spec.name)
    result = launch(gateway, spec, tmp_path, session)
    assert result.status == "failed" and result.exit_code == 1
    assert result.reason == "exited 1: RuntimeError: the agent broke after its first call"
    assert result.answer is None  # answer.txt was never written
    assert "Traceback" in result.stderr
    assert len(gateway.completions(session)) == 1


def test_a_hanging_agent_is_timed_out_and_leaves_no_process(gateway, tmp_path):
    spec = toy_spec(tmp_path, "hang")
    fake_install(spec)
    session = gateway.session(spec.name)
    start = time.monotonic()
    result = launch(gateway, spec, tmp_path, session, timeout_s=8)
    took = time.monotonic() - start
    assert result.status == "timed_out", result
    assert result.reason == "timed out after 8 s of wall time; its processes were killed"
    # not before the deadline (a slower machine only adds to it); that it was the deadline that ended it
    # and not the program's own 300 s is the status and the reason (benchmarks/sandbox.py times closes)
    assert took >= 8
    pids = json.loads((tmp_path / "work" / "pids.json").read_text())
    assert wait_dead(pids) == []
    assert len(gateway.completions(session)) == 1


def test_an_agent_past_its_memory_limit_is_failed(gateway, tmp_path):
    spec = toy_spec(tmp_path, "memory")
    fake_install(spec)
    session = gateway.session(spec.name)
    result = launch(gateway, spec, tmp_path, session, memory_bytes=2 * 2**30)
    assert result.status == "failed" and result.exit_code == 1, result
    assert result.reason == "exited 1 (it ran out of its memory limit of 2048 MiB): MemoryError"
    assert len(gateway.completions(session)) == 1


def test_a_program_that_cannot_start_is_failed(gateway, tmp_path):
    spec = toy_spec(tmp_path, "ok", command=("$workdir/no-such-agent", "$prompt"))
    fake_install(spec)
    result = launch(gateway, spec, tmp_path, gateway.session(spec.name))
    assert result.status == "failed" and result.exit_code is None and result.answer is None
    assert result.reason.endswith("no-such-agent': No such file or directory")


def test_an_agent_that_is_not_installed_is_refused(gateway, tmp_path):
    spec = toy_spec(tmp_path, "ok")
    with pytest.raises(ForgeError, match=r"not installed .* run `forge scaffold add toy-agent` first"):
        launch(gateway, spec, tmp_path, gateway.session(spec.name))
    stale = toy_spec(tmp_path, "ok", name="stale-agent")
    fake_install(stale)
    newer = ScaffoldSpec(**{**stale.__dict__, "install": InstallRecipe("pip", "toy-agent", "==2.0", "python")})
    with pytest.raises(ForgeError, match="forge scaffold add stale-agent"):
        launch(gateway, newer, tmp_path, gateway.session(spec.name))
    assert not (tmp_path / "work").exists()  # nothing was written for an agent that cannot run


def test_agents_home_elsewhere(gateway, tmp_path):
    spec = toy_spec(tmp_path, "ok")
    home = tmp_path / "elsewhere"
    fake_install(spec, home)
    with pytest.raises(ForgeError, match="not installed"):
        launch(gateway, spec, tmp_path, gateway.session(spec.name))
    result = launch(gateway, spec, tmp_path, gateway.session(spec.name), agents_home=home)
    assert result.status == "completed"


def test_definition_mistakes_are_forge_errors(gateway, tmp_path):
    with pytest.raises(ForgeError, match=r"1 bad placeholder: command\[1\]: \$nonsense"):  # refused at registration
        toy_spec(tmp_path, "ok", command=("$python", "$nonsense"))
    with pytest.raises(ForgeError, match="unknown or malformed placeholder"):
        LaunchSpec(command=("$python", "$nonsense")).render({"python": "p"})
    good = toy_spec(tmp_path, "ok")
    fake_install(good)
    session = gateway.session(good.name)
    with pytest.raises(ForgeError, match="leave|stay inside"):
        launch(gateway, good, tmp_path, session, task=Task(id="x", suite="files", prompt="p", files={"../up": "x"}))
    with pytest.raises(ForgeError, match="launch.answer"):
        toy_spec(tmp_path, "ok", answer="file:/etc/passwd")
    with pytest.raises(ForgeError, match="timeout_s must be a positive"):
        launch(gateway, good, tmp_path, session, timeout_s=0)
    white = plugins.get_registry().scaffold("react")
    with pytest.raises(ForgeError, match="not a black-box scaffold"):
        launch(gateway, white, tmp_path, session)


def test_the_builtin_recipes_render_with_a_trajectorys_values(tmp_path):
    """Every built-in black-box recipe renders with the values run_blackbox gives it (no unknown placeholder)."""
    from forge_cli.installer import AgentInstall
    from forge_cli.rollout.blackbox import launch_values

    specs = [e.value for e in plugins.get_registry().scaffolds.values() if e.value.kind == "black"]
    assert {"smolagents", "openai-agents", "opencode", "codex"} <= {s.name for s in specs}
    for spec in specs:
        prefix = tmp_path / spec.name
        install = AgentInstall(spec.name, prefix, "r", "1", installer.bin_path(spec.install, prefix), 0.0)
        values = launch_values(spec, install, base_url="http://127.0.0.1:9/v1", api_key="k-123456789",
                               model="m", prompt="do it", workdir=tmp_path)
        command, env, files = spec.launch.render(values)
        rendered = " ".join([*command, *env.values(), *files.values()])
        assert "do it" in rendered and "$" not in rendered.replace("$schema", "")
        assert values["gateway_url"] == "http://127.0.0.1:9"
        # what run_blackbox fills is what registration accepts (LAUNCH_PLACEHOLDERS; $python for pip agents)
        assert set(values) == set(LAUNCH_PLACEHOLDERS) - ({"python"} if spec.install.manager == "npm" else set())


# ---- the real agents, installed from PyPI by the project's installer -----------------------------------

SHELL_THEN_ANSWER = {
    "smolagents": [
        '<tool_call>\n{"name": "shell", "arguments": {"command": "echo hi > hello.txt"}}\n</tool_call>',
        '<tool_call>\n{"name": "final_answer", "arguments": {"answer": "hello.txt now contains hi"}}\n</tool_call>',
    ],
    "openai-agents": [
        '<tool_call>\n{"name": "shell", "arguments": {"command": "echo hi > hello.txt"}}\n</tool_call>',
        "hello.txt now contains hi",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHELL_THEN_ANSWER))
def test_a_real_agent_writes_the_file(name, tiny_model, tmp_path, installed_agent):
    spec = installed_agent(name)  # from PyPI, once per test session
    live = Live(tiny_model, tmp_path, SHELL_THEN_ANSWER[name])
    try:
        session = live.session(name)
        task = Task(id="files-hello", suite="files", prompt="Create hello.txt containing hi.",
                    files={"README.md": "a work directory for the test\n"})
        result = asyncio.run(run_blackbox(spec, base_url=f"{live.url}/v1", api_key=session["api_key"], model="forge",
                                          task=task, workdir=tmp_path / "work", timeout_s=300))
        assert result.status == "completed", (result.reason, result.stdout[-2000:], result.stderr[-2000:])
        assert (tmp_path / "work" / "hello.txt").read_text() == "hi\n"
        assert result.answer == "hello.txt now contains hi"
        completions = live.completions(session)
        assert len(completions) == 2
        assert '"name": "shell"' in live.decode(completions[0].prompt_ids)
        assert "Create hello.txt containing hi." in live.decode(completions[0].prompt_ids)
        assert "[exit code 0]" in live.decode(completions[1].prompt_ids)
    finally:
        live.close()


@pytest.mark.skipif(__import__("forge_cli.sandbox.bwrap", fromlist=["x"]).unavailable() is not None,
                    reason="no bubblewrap sandbox here")
def test_an_agent_inside_bubblewrap_reaches_the_gateway_through_its_unix_socket(gateway, tmp_path):
    """No network inside but lo: the agent's http://127.0.0.1:PORT is forward.py, in front of the
    gateway's own app served on a unix socket; the completions are recorded as over TCP."""
    import tempfile

    import uvicorn

    from forge_cli.gateway.app import create_app
    from forge_cli.sandbox.contract import GatewayAccess
    from forge_cli.sandbox.local import LocalSandbox

    sock = Path(tempfile.mkdtemp()) / "gateway.sock"
    server = uvicorn.Server(uvicorn.Config(create_app(gateway.live.state), uds=str(sock), log_level="critical"))
    thread = __import__("threading").Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), what="the unix-socket gateway to start")
    assert server.started, "the unix-socket gateway did not start"
    try:
        spec = toy_spec(tmp_path, "ok")
        fake_install(spec)
        session = gateway.session(spec.name)
        port = 18080  # any port: the sandbox's loopback is its own

        async def go():
            tmp_path.chmod(0o755)  # the agent's folder, readable by the sandbox's user as an installed agent's is
            async with LocalSandbox(tmp_path / "work", isolation="bwrap", gateway=GatewayAccess(sock, port),
                                    read_only=(tmp_path,)) as box:
                return await run_blackbox(spec, base_url=f"http://127.0.0.1:{port}/v1", api_key=session["api_key"],
                                          model="forge", task=TASK, timeout_s=120, sandbox=box)

        ran = asyncio.run(go())
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert ran.status == "completed", (ran.reason, ran.stderr[-2000:])
    assert ran.answer == "All finished."
    calls = gateway.completions(session)
    assert [c.seq for c in calls] == [0, 1]
    assert [gateway.decode(c.output_ids).startswith(t) for c, t in zip(calls, ("Sure, working.", "All finished."))] \
        == [True, True]


# ---- MCP for black-box agents: the option, each agent's own configuration, the servers' environment ------


def test_the_mcp_option_is_taken_by_agents_that_speak_mcp_and_refused_in_one_line_by_the_others():
    from forge_cli.rollout.agent_mcp import AGENTS

    registry = plugins.get_registry()
    for name in ("opencode", "codex", "claude-code", "openai-agents", "smolagents"):
        assert registry.options_for("scaffolds", name, {"mcp": ["files", "shell"]}, "forge.toml").mcp == ["files", "shell"]
    for name in ("aider", "mini-swe-agent"):
        assert name not in AGENTS
        with pytest.raises(ForgeError, match=rf"\[scaffolds.{name}\]: mcp: .*the agent '{name}' cannot use MCP servers"):
            registry.options_for("scaffolds", name, {"mcp": ["files"]}, "forge.toml")
        assert registry.options_for("scaffolds", name, {}, "forge.toml").mcp == []
    with pytest.raises(ForgeError, match="mcp.0: Input should be 'shell', 'files' or 'search'"):
        registry.options_for("scaffolds", "opencode", {"mcp": ["nope"]}, "forge.toml")


def test_each_agent_gets_the_servers_in_its_own_configuration(tmp_path):
    import tomllib

    from forge_cli.rollout.agent_mcp import CONFIG_FILE, Launch, configure

    servers = {"files": ["/py", "/t/files_server.py", "--root", str(tmp_path)], "shell": ["/py", "/t/shell_server.py"]}
    registry = plugins.get_registry()

    def rendered(name: str) -> Launch:
        spec = registry.scaffold(name)
        values = {k: "x" for k in ("bin", "scaffolds", "base_url", "gateway_url", "api_key", "model", "prompt", "python")}
        command, env, files = spec.launch.render({**values, "workdir": str(tmp_path)})
        return configure(name, Launch(list(command), dict(env), dict(files)), servers, tmp_path)

    opencode = json.loads(rendered("opencode").files["opencode.json"])
    assert opencode["mcp"]["files"]["command"] == servers["files"] and opencode["mcp"]["shell"]["type"] == "local"
    assert opencode["provider"]["forge"]["options"]["apiKey"] == "x"  # the recipe's own config kept
    codex = tomllib.loads(rendered("codex").files[".codex/config.toml"])
    assert codex["mcp_servers"]["files"] == {"command": "/py", "args": servers["files"][1:], "startup_timeout_sec": 120,
                                             "tool_timeout_sec": 300, "required": True}  # codex waits for it
    assert codex["model_providers"]["forge"]["wire_api"] == "responses"
    for name in ("claude-code", "openai-agents", "smolagents"):
        launch = rendered(name)
        at = launch.command.index("--mcp-config")
        assert launch.command[at + 1] == str(tmp_path / CONFIG_FILE)
        listed = json.loads(launch.files[CONFIG_FILE])["mcpServers"]
        assert [listed["files"]["command"], *listed["files"]["args"]] == servers["files"]
    assert rendered("claude-code").command[-1] == "--strict-mcp-config"
    waits = {k: v for k, v in rendered("claude-code").env.items() if k.startswith("MCP_CONNECT")}
    assert waits == {"MCP_CONNECTION_NONBLOCKING": "0", "MCP_CONNECT_TIMEOUT_MS": "120000"}  # claude-code waits for them
    with pytest.raises(ForgeError, match="the agent 'aider' cannot use MCP servers"):
        configure("aider", Launch([], {}, {}), servers, tmp_path)


def test_the_servers_environment_is_made_once_and_its_python_serves_the_tools(tmp_path):
    """Under FORGE_HOME/agents: a venv with the mcp SDK copied from Forge's environment and the server scripts;
    its python (nothing of Forge's venv on its path) starts the files server, which lists its tools."""
    import subprocess

    from forge_cli.rollout import agent_mcp

    python, tools = agent_mcp.tools_env(tmp_path)
    assert python.is_relative_to(tmp_path) and (tools / "files_server.py").is_file()
    made = (tmp_path / agent_mcp.ENV_DIR / installer.MARKER).stat().st_mtime_ns
    assert agent_mcp.tools_env(tmp_path) == (python, tools)  # current: not made again
    assert (tmp_path / agent_mcp.ENV_DIR / installer.MARKER).stat().st_mtime_ns == made
    probe = ("import sys, mcp; assert not any('/work/' in p and '.venv' in p for p in sys.path), sys.path; "
             "print(mcp.__file__)")
    done = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(str(tmp_path)), done.stderr
    hello = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    # stdin stays open until the listing came back: a server may end on EOF before it answered what it read
    server = subprocess.Popen([str(python), str(tools / "files_server.py"), "--root", str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server.stdin.write("".join(json.dumps(m) + "\n" for m in hello))
        server.stdin.flush()
        names: set[str] = set()
        for line in server.stdout:  # ends at EOF if the server died
            message = json.loads(line) if line.strip() else {}
            if message.get("id") == 2:
                names = {t["name"] for t in message["result"]["tools"]}
                break
    finally:
        server.stdin.close()
        server.kill()
        err = server.stderr.read()
        server.wait(timeout=30)
    assert {"read_file", "write_file", "edit_file", "list_files"} <= names, err[-500:]


# What each built-in agent's launch turns off so that, sandboxed or not, it sends nothing but its LLM calls:
# update checks, telemetry and analytics, price-map and model-list downloads. (smolagents and its runner
# have none of their own: the OpenAI SDK only talks to the gateway.)
NOISE_OFF = {
    "opencode": {"env": {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
                         "OPENCODE_DISABLE_LSP_DOWNLOAD": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1"},
                 "files": ['"autoupdate": false', '"share": "disabled"']},
    "codex": {"env": {"NO_UPDATE_NOTIFIER": "1"},
              "files": ["check_for_update_on_startup = false", "[analytics]\nenabled = false", '[otel]\nexporter = "none"']},
    "claude-code": {"env": {"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
                            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}},
    "mini-swe-agent": {"env": {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "MSWEA_COST_TRACKING": "ignore_errors"}},
    "aider": {"env": {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}, "args": ["--no-check-update", "--analytics-disable"]},
    "openai-agents": {"env": {"OPENAI_AGENTS_DISABLE_TRACING": "1"}},
    "smolagents": {},
    "qwen-code": {"env": {"QWEN_CODE_TRUST_WORKSPACE": "true"},
                  "files": ['"usageStatisticsEnabled": false', '"telemetry": {"enabled": false}', '"disableAutoUpdate": true']},
    "gemini-cli": {"files": ['"usageStatisticsEnabled": false', '"telemetry": {"enabled": false}', '"enableAutoUpdate": false']},
    "pi": {"env": {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1"}},
    "cn": {"env": {"CONTINUE_CLI_ENABLE_TELEMETRY": "0", "CONTINUE_METRICS_ENABLED": "0"}},
    "gptme": {"env": {"GPTME_TELEMETRY_ENABLED": "false"}},
    "agno": {"env": {"AGNO_TELEMETRY": "false"}},
    "google-adk": {"env": {"OTEL_SDK_DISABLED": "true", "GOOGLE_GENAI_USE_VERTEXAI": "FALSE"}},
    "autogen": {"env": {"AUTOGEN_DISABLE_RUNTIME_TRACING": "true"}},
    "open-interpreter": {"env": {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "DISABLE_TELEMETRY": "true"}},
    "copilot": {"env": {"COPILOT_OFFLINE": "true"}},
    "hermes-agent": {"args": ["--ignore-user-config"]},
    "kilo": {"env": {"KILO_DISABLE_AUTOUPDATE": "1"}, "files": ['"autoupdate": false', '"share": "disabled"']},
    "dspy": {"env": {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}},
    "crewai": {"env": {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false", "OTEL_SDK_DISABLED": "true"}},
    "pydantic-ai": {}, "langgraph": {}, "llm": {}, "llama-index": {},  # their runners / the CLI talk only to the gateway
}


def test_every_built_in_agent_launches_with_its_network_noise_off():
    registry = plugins.get_registry()
    builtin = {name for name, e in registry.scaffolds.items() if e.value.kind == "black" and e.plugin == "forge:scaffolds"}
    assert builtin == set(NOISE_OFF)  # a new built-in agent says what it turns off
    for name, off in NOISE_OFF.items():
        launch = registry.scaffold(name).launch
        for key, value in off.get("env", {}).items():
            assert launch.env.get(key) == value, (name, key)
        assert set(off.get("args", [])) <= set(launch.command), name
        files = "\n".join(launch.files.values())
        assert all(text in files for text in off.get("files", [])), name


@pytest.mark.parametrize("rule", ANSWER_RULES)
def test_every_answer_rule_the_contract_names_is_read(rule, tmp_path):
    """``specs.ANSWER_RULES`` (what a scaffold may declare) and the rollout's reading of each agree:
    each rule the contract accepts gives the agent's answer, from stdout or from its file."""
    from forge_cli.rollout.blackbox import _answer
    from forge_cli.sandbox.contract import ExecResult
    from forge_cli.specs import check_answer_rule

    class Files:  # the seam: the sandbox's file read (its containment is tested with the backends)
        async def read_file(self, path: str) -> bytes:
            return (tmp_path / path).read_bytes()

    declared = rule.replace("NAME", "answer.txt").replace("KEY", "item.text")
    check_answer_rule("s", declared)
    (tmp_path / "answer.txt").write_text("from the file\n")
    events = ('{"type": "item.completed", "item": {"type": "agent_message", "text": "from the event"}}\n'
              '{"type": "turn.completed", "usage": {"output_tokens": 9}}\n')
    done = ExecResult(exit_code=0, stdout="thinking\nthe answer\n" + events, stderr="", wall_s=0.1, reason="exited 0")
    expected = {"stdout": "thinking\nthe answer\n" + events.strip(), "last-line": events.strip().splitlines()[-1],
                "file:NAME": "from the file", "json:KEY": "from the event"}[rule]
    assert asyncio.run(_answer(declared, done, Files())) == expected


def test_the_json_answer_rule_reads_the_last_event_that_holds_its_key():
    from forge_cli.rollout.blackbox import json_answer
    from forge_cli.specs import check_answer_rule

    out = '\n'.join(['not json', '{"result": "first"}', '[1, 2]', '{"result": {"n": 3}}', '{"other": 1}', '{"result": null}'])
    assert json_answer(out, "result") == '{"n": 3}'  # the last that holds it; null is not an answer
    assert json_answer(out, "result.n") == "3" and json_answer(out, "missing") is None and json_answer("", "x") is None
    for bad in ("json:", "json:a..b", "json:a b", "json:$.x"):
        with pytest.raises(ForgeError, match="json:KEY"):
            check_answer_rule("s", bad)
