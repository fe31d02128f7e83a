"""Scaffold definitions point at code: the loop contract, loop resolution, the context-policy table,
and the example plugin's scaffold running one whole episode through a real gateway."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_cli.records.session import SessionRequest
from forge_cli import plugins
from forge_cli.errors import ForgeError
from forge_cli.rollout import context
from forge_cli.rollout.loop import Episode, Tool, loop_status, resolve_loop, run_episode
from forge_cli.specs import ScaffoldSpec
from tests.conftest import EXAMPLE_PLUGIN, LiveGateway


@pytest.fixture
def example(fake_dist, monkeypatch):
    """The example plugin installed as a distribution (its entry point), found by the real loader."""
    monkeypatch.syspath_prepend(str(EXAMPLE_PLUGIN))
    fake_dist("forge-scaffold-example", {}, {"example": "forge_scaffold_example"})
    plugins.reset()
    registry = plugins.get_registry()
    assert registry.warnings == []
    return registry


# ---- the example plugin's scaffold really runs -------------------------------------------------------


def _policy(seen: list[dict]):
    """Two look-ups in the example's sexpr syntax, then an answer built from the tool results it still sees."""

    def policy(ctx):
        seen.append(ctx)
        tool_results = [m["content"] for m in ctx["messages"] if m.get("role") == "tool"]
        asked = sum(1 for m in ctx["messages"] if m.get("role") == "assistant")
        if asked == 0 and not tool_results:
            return '(call lookup {"key": "first"})'
        if len(seen) == 2:
            return '(call lookup {"key": "second"})'
        return "The values are " + " and ".join(tool_results) + "."

    return policy


def test_example_scaffold_runs_an_episode_through_the_gateway(example, tiny_model, tmp_path):
    from forge_cli.config import load_config
    from forge_cli.engine.scripted import ScriptedEngine
    from forge_cli.gateway.state import GatewayState
    from forge_cli.pool.store import DataPool

    (tmp_path / "forge.toml").write_text(
        '[scaffolds.example-sexpr]\npersona = "You are Quill, a terse archivist."\nkeep_last = 1\nmax_turns = 5\n'
    )
    raw_options = load_config(env={}).scaffolds["example-sexpr"]
    seen: list[dict] = []
    engine = ScriptedEngine(tiny_model, _policy(seen))
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, {n: e.value for n, e in example.tool_formats.items()},
                         pool=pool, admin_key="admin")
    live = LiveGateway(state)
    looked_up: list[object] = []

    def lookup(arguments):
        looked_up.append(arguments)
        return {"first": "11", "second": "31"}[arguments["key"]]

    tools = [Tool("lookup", "Look a key up.", {"type": "object", "properties": {"key": {"type": "string"}}}, lookup)]
    spec = example.scaffold("example-sexpr")
    try:
        async def episode():
            session = await state.create_session(SessionRequest(task_id="sum", scaffold=spec.name, tool_format=spec.tool_format))
            result = await run_episode("example-sexpr", base_url=f"{live.url}/v1", api_key=session.api_key,
                                       prompt="What are the values of first and second?", options=raw_options,
                                       tools=tools, registry=example, source=str(tmp_path / "forge.toml"))
            return session, result

        session, result = asyncio.run(episode())
        assert result.answer == "The values are 31."  # keep_last = 1: the first look-up was out of context
        assert looked_up == [{"key": "first"}, {"key": "second"}]
        completions = pool.trajectory(session.trajectory_id).completions
        assert len(completions) == 3
        prompts = [engine.tokenizer.decode(c.prompt_ids) for c in completions]
        # the option from forge.toml reached the loop (its system prompt) ...
        assert all("You are Quill, a terse archivist." in p for p in prompts)
        # ... the gateway rendered the tools in the scaffold's sexpr format and parsed the calls
        assert "(call NAME" in prompts[0] and [c.tool_format for c in completions] == ["sexpr"] * 3
        assert engine.tokenizer.decode(completions[0].output_ids).startswith('(call lookup {"key": "first"})')
        # ... and keep_last = 1 reached the context policy: the third call no longer holds the first turn
        assert "11" in prompts[1] and "11" not in prompts[2] and "31" in prompts[2]
        assert [(e.kind, e.data) for e in result.events] == [
            ("context.keep-last-k", {"removed_messages": 2, "removed_turns": 1, "kept_turns": 1})
        ]
        assert len(seen[2]["messages"]) == 4  # system, task, the second call and its result
    finally:
        live.stop()
        pool.close()


def test_options_are_validated_by_the_plugin_model_before_the_loop_runs(example):
    with pytest.raises(ForgeError, match=r"forge.toml \[scaffolds.example-sexpr\]: persona: Input should be a valid string"):
        asyncio.run(run_episode("example-sexpr", base_url="http://127.0.0.1:9/v1", api_key="k", prompt="p",
                                options={"persona": 3}, registry=example))


# ---- loop resolution ----------------------------------------------------------------------------------


def test_scaffold_show_says_whether_the_loop_resolves(example, cli):
    shown = json.loads(cli("scaffold", "show", "example-sexpr", "--json").stdout)
    assert shown["loop"] == "forge_scaffold_example.loop:SexprLoop (resolves)"
    react = json.loads(cli("scaffold", "show", "react", "--json").stdout)
    assert react["loop"] == "forge_cli.rollout.families.react:run (resolves)"
    registry = plugins.get_registry()
    assert [n for n, e in registry.scaffolds.items() if e.value.kind == "white" and loop_status(e.value) is not None] == []
    assert loop_status(_spec()) == "scaffold 'probe' names no loop (its probe family has no code yet)"


def _spec(**kw) -> ScaffoldSpec:
    return ScaffoldSpec(**{"name": "probe", "kind": "white", "family": "probe", "description": "d", **kw})


async def _async_loop(episode):
    return "async function"


class _ClassLoop:
    async def run(self, episode):
        return "class"


def test_a_loop_is_an_async_function_or_a_class_with_async_run():
    episode = Episode(scaffold=_spec(), base_url="u", api_key="k", prompt="p", options={})
    assert asyncio.run(resolve_loop(_spec(loop=_async_loop))(episode)) == "async function"
    assert asyncio.run(resolve_loop(_spec(loop=f"{__name__}:_ClassLoop"))(episode)) == "class"
    with pytest.raises(ForgeError, match="not an async function"):
        resolve_loop(_spec(loop=lambda episode: None))
    assert loop_status(_spec(loop=f"{__name__}:_NoSuchLoop")).startswith(
        f"scaffold 'probe': loop '{__name__}:_NoSuchLoop' does not resolve (AttributeError")


@pytest.mark.parametrize(("loop", "message"), [
    ("no_such_module_anywhere:run", "loop 'no_such_module_anywhere:run': no module named 'no_such_module_anywhere'"),
    ("not a reference", "loop 'not a reference' is not a 'package.module:attribute' reference"),
    (42, "loop 42 is not a 'package.module:attribute' reference"),
])
def test_a_loop_that_cannot_be_found_is_rejected_at_registration(loop, message):
    with pytest.raises(ForgeError) as info:
        _spec(loop=loop).validate()
    assert str(info.value) == f"scaffold 'probe': {message}"


def test_registration_finds_the_loop_module_without_importing_it(fake_dist):
    import sys

    fake_dist("lazy-plugin", {
        "lazy_plugin_mod": '''
from forge_cli import hookimpl
from forge_cli.specs import ScaffoldSpec
@hookimpl
def register_scaffolds(register):
    register(ScaffoldSpec(name="lazy", kind="white", family="f", loop="lazy_plugin_loop:run", description="d"))
''',
        "lazy_plugin_loop": "raise RuntimeError('imported at registration')\n",
    }, {"lazy": "lazy_plugin_mod"})
    plugins.reset()
    registry = plugins.get_registry()
    assert registry.warnings == [] and "lazy" in registry.scaffolds
    assert "lazy_plugin_loop" not in sys.modules
    assert "imported at registration" in loop_status(registry.scaffold("lazy"))


def test_a_black_box_scaffold_has_no_loop():
    from forge_cli.specs import InstallRecipe, LaunchSpec

    spec = ScaffoldSpec(name="agent-x", kind="black", description="d", loop=_async_loop,
                        install=InstallRecipe("pip", "x", ">=1", "x"), launch=LaunchSpec(("x",)))
    with pytest.raises(ForgeError, match="a black-box scaffold is launched; it has no loop"):
        spec.validate()


# ---- the context-policy table ----------------------------------------------------------------------------


def test_context_policy_names_are_checked_against_the_table():
    assert _spec().context_policy == "full"
    assert context.context_policy("full") is context.CONTEXT_POLICIES["none"]  # the older name is an alias
    with pytest.raises(ForgeError, match=r"scaffold 'probe': no context policy named 'keep-last' \(known: none, truncate,"
                       r" discard-tool-output, summarize, keep-last-k, agent, full \(= none\)\)"):
        _spec(context_policy="keep-last").validate()
    with pytest.raises(ForgeError, match=r"context policy 'agent' is not for white-box scaffolds \(use none, truncate"):
        _spec(context_policy="agent").validate()
    registry = plugins.get_registry()
    for entry in registry.scaffolds.values():
        assert context.context_policy(entry.value.context_policy).name in context.CONTEXT_POLICIES


def test_builtin_white_box_options_are_the_loop_s_plus_the_policy_s():
    registry = plugins.get_registry()
    fields = {name: set(e.value.options.model_fields) for name, e in registry.scaffolds.items() if e.value.kind == "white"}
    loop = {"max_turns", "max_tokens", "temperature", "mcp"}  # mcp: the servers its tools may come from
    call = loop | {"system_prompt"}  # the tool-call family's own
    assert fields["react"] == loop
    assert fields["tool-call-unlisted"] == fields["tool-call"] == call
    assert fields["truncate-bc"] == call | {"context_budget_tokens"}
    assert fields["keep-last-k"] == call | {"keep_last"}
    assert fields["plan-and-execute"] == loop | {"max_steps"}
    with pytest.raises(ForgeError, match="keep_last: unknown key"):
        registry.options_for("scaffolds", "react", {"keep_last": 2}, "forge.toml")
    options = registry.options_for("scaffolds", "keep-last-k", {"keep_last": 2}, "forge.toml")
    assert context.policy_options("keep-last-k", options) == context.KeepLastKOptions(keep_last=2)


def test_a_policy_that_is_only_named_refuses_to_run(monkeypatch):
    named = context.ContextPolicy("summarize", "d", "white", context.SummarizeOptions)  # no implementation
    monkeypatch.setitem(context.CONTEXT_POLICIES, "summarize", named)
    spec = _spec(context_policy="summarize", loop=_async_loop)
    with pytest.raises(ForgeError, match="its context policy 'summarize' is not implemented yet"):
        asyncio.run(run_episode(spec, base_url="u", api_key="k", prompt="p", registry=plugins.get_registry()))


roles = st.sampled_from(["user", "assistant", "tool"])
histories = st.tuples(
    st.integers(0, 2), st.booleans(), st.lists(roles, max_size=12)
).map(lambda t: [{"role": "system", "content": f"s{i}"} for i in range(t[0])]
      + ([{"role": "user", "content": "task"}] if t[1] else [])
      + [{"role": r, "content": f"m{i}"} for i, r in enumerate(t[2])])


@given(messages=histories, k=st.integers(0, 6))
def test_keep_last_k_keeps_the_head_and_the_last_k_turns(messages, k):
    kept, removed = context.keep_last_k(messages, context.KeepLastKOptions(keep_last=k))
    # the plain computation: head = leading system messages and the task; turns start at assistants
    head = 0
    while head < len(messages) and messages[head]["role"] == "system":
        head += 1
    if head < len(messages) and messages[head]["role"] == "user":
        head += 1
    turns: list[list[dict]] = []
    for m in messages[head:]:
        if not turns or m["role"] == "assistant":
            turns.append([])
        turns[-1].append(m)
    expected = messages[:head] + [m for turn in (turns[len(turns) - k:] if k else []) for m in turn]
    if len(turns) <= k:
        expected = messages
    assert kept == expected
    assert (removed is None) == (kept == messages)
    if removed is not None:
        assert removed == {"removed_messages": len(messages) - len(kept), "removed_turns": len(turns) - k, "kept_turns": k}


def test_registering_the_example_imports_neither_its_loop_nor_the_openai_client():
    import subprocess
    import sys

    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(EXAMPLE_PLUGIN)!r})\n"
        "import forge_scaffold_example\n"
        "from forge_cli import plugins\n"
        "pm, reg = plugins.load_plugins(extra=[('example', forge_scaffold_example)])\n"
        "plugins.collect(pm, reg)\n"
        "assert reg.scaffolds['example-sexpr'].plugin == 'example', reg.warnings\n"
        # the pool's records (forge_cli.pool.types) are contracts the host reads; its store is not
        "print(','.join(m for m in ('forge_scaffold_example.loop', 'openai', 'forge_cli.pool.store', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
