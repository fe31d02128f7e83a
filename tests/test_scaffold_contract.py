"""The white-box scaffold contract: every registered white-box scaffold, read from the registry,
runs one whole episode through a real gateway (uvicorn on 127.0.0.1, the ``scripted`` engine, a
SQLite pool) with :func:`run_episode`, and what it leaves is checked: the recorded completions
(one per model call, each prompt the rendered request, each output the scripted reply, the tool
calls parsed, the agent that made it), the context-management events (what they removed, the
token counts they acted on), and the verifier seeing the final answer.

The scripted policy acts like a competent agent for each family: it reads the context the gateway
hands it (messages, tools, the rendered prompt), looks up the keys the task (or its step, or its
sub-task) names, carries what it found forward in its own notes (so context management cannot
make it forget), writes its tool calls in the session's tool format, and answers with the sum.
Observations are long, so with a small context budget every context policy has to act.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from pathlib import Path

import pytest

from forge_cli.records.session import SessionRequest
from forge_cli import plugins
from forge_cli.rollout import context
from forge_cli.rollout.families import plan_execute, react
from forge_cli.rollout.families.orchestrator import ORCHESTRATOR
from forge_cli.rollout.loop import Tool, run_episode
from forge_cli.specs import ToolCall
from forge_cli.tasks.types import Outcome, Task, Transcript
from tests.conftest import LiveGateway

KEYS = ("alpha", "bravo", "charlie")
FILLER_WORDS = 80  # ~290 tokens per observation with the tiny model's tokenizer
BUDGET = 720  # the head and one observation fit; two do not
PLAN = "1. Look up alpha and bravo\n2. Look up charlie\n3. Report the sum of alpha, bravo and charlie"
FACT = re.compile(r"\b(alpha|bravo|charlie)(?:=| is )(\d+)")


def white_scaffolds() -> list[str]:
    registry = plugins.get_registry()
    return sorted(name for name, entry in registry.scaffolds.items() if entry.value.kind == "white")


# ---- the task: three look-ups and a sum, with its verifier -----------------------------------------------


class SumVerifier:
    """Solved when the answer names the sum of the three values; remembers every transcript it saw."""

    def __init__(self) -> None:
        self.seen: list[Transcript] = []

    def verify(self, task: Task, workdir: Path, transcript: Transcript) -> Outcome:
        self.seen.append(transcript)
        found = re.findall(r"-?\d+", transcript.answer or "")
        return Outcome(1.0 if str(task.answer) in found else 0.0, f"wanted {task.answer}, got {transcript.answer!r}")


def make_task(rng: random.Random) -> tuple[Task, dict[str, str], list[Tool], list[str]]:
    values = {key: rng.randint(10, 999) for key in KEYS}
    looked: list[str] = []
    texts = {key: f"The value of {key} is {v}. " + " ".join(f"{key[0]}{rng.randint(0, 99)}" for _ in range(FILLER_WORDS))
             for key, v in values.items()}

    def lookup(arguments):
        looked.append(arguments["key"])
        return texts[arguments["key"]]

    task = Task(id="sum-3", suite="contract", prompt="Look up the values of the keys alpha, bravo and charlie with "
                "the lookup tool and report their sum.", answer=sum(values.values()))
    tool = Tool("lookup", "Look the value of a key up.",
                {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}, lookup)
    return task, texts, [tool], looked


# ---- the scripted agent ----------------------------------------------------------------------------------


def _text(message: dict) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else json.dumps(content)


def _mode(ctx: dict) -> str:
    messages = ctx["messages"]
    system = _text(messages[0]) if messages and messages[0]["role"] == "system" else ""
    if messages and _text(messages[-1]) == context.SUMMARY_REQUEST:
        return "summary"
    if system.startswith(plan_execute.PLANNER[:20]):
        return "planner"
    if any(t["function"]["name"] == "delegate" for t in ctx["tools"]):
        return "orchestrator"
    if system.startswith(react.INSTRUCTIONS):
        return "react"
    return "agent"


def _instruction(ctx: dict) -> str:
    task = next(_text(m) for m in ctx["messages"] if m["role"] == "user")
    return task.rsplit("Now do step", 1)[-1]


class Agent:
    """The scripted policy: one competent agent for every family (see the module's docstring)."""

    def __init__(self, formats: dict[str, str]) -> None:
        self.formats = formats  # session id -> tool format
        self.calls: dict[str, list[tuple[str, dict, str]]] = {}  # session -> (mode, context, reply)
        self.looked_up: dict[str, list[str]] = {}  # session -> the keys it wrote look-ups for

    def __call__(self, ctx: dict) -> str:
        mode = _mode(ctx)
        reply = self.reply(mode, ctx)
        self.calls.setdefault(ctx["session"], []).append((mode, ctx, reply))
        return reply

    def call(self, ctx: dict, name: str, arguments: dict, note: str) -> str:
        fmt = plugins.get_registry().tool_format(self.formats[ctx["session"]])
        return f"{note}\n{fmt.format_calls([ToolCall(name, arguments)])}"

    def reply(self, mode: str, ctx: dict) -> str:
        facts = dict(FACT.findall(" ".join(_text(m) for m in ctx["messages"])))
        note = "Known: " + ", ".join(f"{k}={facts[k]}" for k in KEYS if k in facts) + "."
        if mode == "summary":
            return note
        if mode == "planner":
            return PLAN
        instruction = _instruction(ctx)
        needed = list(KEYS) if mode == "orchestrator" or "sum" in instruction else [k for k in KEYS if k in instruction]
        missing = [k for k in needed if k not in facts]
        if mode == "orchestrator":
            if missing:
                task = "Look up alpha and bravo" if missing[0] != "charlie" else "Look up charlie"
                return self.call(ctx, "delegate", {"task": task}, note)
        elif missing:
            self.looked_up.setdefault(ctx["session"], []).append(missing[0])
            if mode == "react":
                return f"Thought: {note}\nAction: lookup\nAction Input: {json.dumps({'key': missing[0]})}"
            return self.call(ctx, "lookup", {"key": missing[0]}, note)
        if mode == "agent" and "sum" not in instruction and len(needed) < len(KEYS):
            return ", ".join(f"{k}={facts[k]}" for k in needed)  # a step's or a worker's result
        answer = f"The sum is {sum(int(facts[k]) for k in KEYS)}."
        return f"Thought: {note}\n{react.FINAL} {answer}" if mode == "react" else answer


# ---- one gateway for every scaffold ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tiny_model, tmp_path_factory):
    from forge_cli.engine.scripted import ScriptedEngine
    from forge_cli.gateway.state import GatewayState
    from forge_cli.pool.store import DataPool

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 1.6M-parameter model: more threads only contend with other processes
    formats: dict[str, str] = {}
    agent = Agent(formats)
    engine = ScriptedEngine(tiny_model, agent, max_model_len=8192)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("contract") / "pool.sqlite")
    registry = plugins.get_registry()
    state = GatewayState(engine, engine.tokenizer, {n: e.value for n, e in registry.tool_formats.items()},
                         pool=pool, admin_key="admin")
    live = LiveGateway(state)
    yield live, state, engine, pool, agent, formats
    live.stop()
    pool.close()
    torch.set_num_threads(threads)


def test_every_family_and_policy_and_format_is_registered():
    names = set(white_scaffolds())
    for legacy in ("react", "truncate-bc", "discard-tool-output", "summarize", "keep-last-k"):
        assert legacy in names
    for expected in ("tool-call", "tool-call-truncate", "react-summarize", "plan-and-execute-keep-last-k",
                     "orchestrator-discard-tool-output", "tool-call_hermes", "tool-call-truncate_xml-tags"):
        assert expected in names
    registry = plugins.get_registry()
    for name in names:
        assert isinstance(registry.scaffold(name).loop, str)  # every definition points at its loop


def run_one(gateway, spec, task, tools, options):
    """One episode of ``spec`` on ``task`` through the module's gateway: (its session, its result)."""
    live, state, engine, pool, agent, formats = gateway

    async def episode():
        session = await state.create_session(SessionRequest(task_id=task.id, scaffold=spec.name, tool_format=spec.tool_format))
        formats[session.id] = spec.tool_format or state.default_tool_format
        result = await run_episode(spec, base_url=f"{live.url}/v1", api_key=session.api_key, prompt=task.prompt,
                                   options=options, tools=tools, registry=plugins.get_registry())
        return session, result

    return asyncio.run(episode())


@pytest.mark.parametrize("name", white_scaffolds())
def test_scaffold_runs_an_episode_through_the_gateway(gateway, name):
    live, state, engine, pool, agent, formats = gateway
    registry = plugins.get_registry()
    spec = registry.scaffold(name)
    policy = context.context_policy(spec.context_policy).name
    rng = random.Random(name)
    task, texts, tools, looked = make_task(rng)
    verifier = SumVerifier()
    fields = spec.options.model_fields
    options = {"max_tokens": 512, **({"context_budget_tokens": BUDGET} if "context_budget_tokens" in fields else {}),
               **({"keep_last": 1} if "keep_last" in fields else {})}

    session, result = run_one(gateway, spec, task, tools, options)
    # the verifier saw the episode's final answer, and it is right
    outcome = verifier.verify(task, Path("."), Transcript(answer=result.answer))
    assert verifier.seen == [Transcript(answer=result.answer)] and outcome.solved, outcome.reason

    # one recorded completion per model call, in order; each prompt is the rendered request and
    # each output the scripted reply
    calls = agent.calls[session.id]
    completions = pool.trajectory(session.trajectory_id).completions
    assert [c.seq for c in completions] == list(range(len(calls)))
    tok = engine.tokenizer
    for (mode, ctx, reply), c in zip(calls, completions):
        prompt = tok.decode(c.prompt_ids)
        assert prompt == ctx["prompt_text"]
        assert all(_text(m) in prompt for m in ctx["messages"] if m["role"] in ("user", "tool") and isinstance(m["content"], str))
        assert c.output_ids[-1] == tok.eos_token_id and tok.decode(c.output_ids[:-1]) == reply
        assert c.tool_format == (spec.tool_format or state.default_tool_format) and c.parse_errors == []
        if mode in ("planner", "orchestrator"):
            assert c.agent == mode
        elif spec.family == "plan-and-execute":
            assert c.agent == "executor"
        elif spec.family == "orchestrator":
            assert re.fullmatch(r"worker-\d", c.agent or ""), c.agent
        else:
            assert c.agent is None
    # every tool call the agent wrote was parsed (by the gateway in the session's format, or by the
    # react loop) and run once with the arguments written
    written = agent.looked_up[session.id]
    assert written == looked == list(KEYS)

    # the context events: what each policy removed, on the numbers it acted on
    events = [e for e in result.events if e.kind.startswith("context.")]
    assert all(e.kind == f"context.{policy}" for e in events)
    if policy == "none":
        assert events == [] and not any(mode == "summary" for mode, _, _ in calls)
        return
    assert events, f"{policy} never acted"
    after = [next(c for c in completions if c.started_at >= e.at and c.agent == e.data.get("agent")) for e in events]
    for event, nxt in zip(events, after):
        data, prompt = event.data, tok.decode(nxt.prompt_ids)
        if policy == "truncate":
            # the gateway's own count: exactly the next completion's prompt, within the budget
            assert data["tokens_before"] > BUDGET and data["tokens_after"] == len(nxt.prompt_ids)
            # within the budget — or, when even the head and the newest turn do not fit, exactly those
            assert data["tokens_after"] <= BUDGET or data["kept_turns"] == 1, data
            assert data["removed_turns"] >= 1 and data["removed_messages"] >= 2
        elif policy == "summarize":
            summaries = [(ctx, reply) for mode, ctx, reply in calls if mode == "summary"]
            assert data["summary"] in [reply for _, reply in summaries] and data["tokens_before"] > BUDGET
            assert context.SUMMARY_PREFIX + data["summary"] in prompt
        elif policy == "discard-tool-output":
            assert "[tool output removed]" in prompt and data["removed_chars"] > 0
        elif policy == "keep-last-k":
            assert data["removed_turns"] >= 1 and data["kept_turns"] == 1
    # the first observation removed is not in the prompt that follows (its value survives in the notes)
    assert texts["alpha"] not in tok.decode(after[0].prompt_ids)
    if policy == "summarize":
        assert len([m for m, _, _ in calls if m == "summary"]) == len(events)


@pytest.mark.parametrize("system", [None, "", "Be brief."], ids=["default", "none", "own"])
def test_tool_call_unlisted_prompts_hold_the_system_prompt_option_and_no_tool_listing(gateway, system):
    """The embedded default's scaffold: the request's tools are not rendered into the prompt (the
    calls are still parsed and run), and ``system_prompt`` is the system message ("" = none)."""
    from forge_cli.rollout.families import SYSTEM

    agent = gateway[4]
    spec = plugins.get_registry().scaffold("tool-call-unlisted")
    task, _, tools, looked = make_task(random.Random(7))
    options = {"max_tokens": 512, **({} if system is None else {"system_prompt": system})}

    session, result = run_one(gateway, spec, task, tools, options)
    assert result.answer == f"The sum is {task.answer}." and looked == list(KEYS)
    want = SYSTEM if system is None else system
    head = f"<|im_start|>system\n{want}<|im_end|>\n" if want else ""
    first = agent.calls[session.id][0][1]["prompt_text"]
    assert first == f"{head}<|im_start|>user\n{task.prompt}<|im_end|>\n<|im_start|>assistant\n"
