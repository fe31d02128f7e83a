"""Token drift: does an agent's second request render back to the ids the model sampled on its first?

Two tables, both through the real gateway (native format, the family's real tokenizer and its
test-written template, vLLM's parsers; a scripted policy writes the model's text and a tiny random
model scores it):

- **agents**: each of the seven black-box agents' captured second requests (tests/fixtures/
  agent_requests) on Qwen3. The request is cut before its last assistant turn and sent as the first
  call; the model answers with that assistant turn in Qwen3's own syntax; then the agent's captured
  request is sent as it is (its own call ids, its own argument text, and — as agents do — without
  the thinking the model sampled, which the gateway puts back). The second completion's prompt
  history says whether the ids the model sampled survived, and a drift's cause is named.
- **families**: a three-call conversation per family: a tool call (after thinking where the family
  thinks), the tool's result, then a new user question (where Qwen's templates drop the earlier
  thinking).

    python benchmarks/drift.py [--out PATH]

Prints the tables and writes benchmarks/results/drift.json (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

FIXTURES = HERE.parent / "tests" / "fixtures" / "agent_requests"
AGENTS = {  # fixture -> (agent, API)
    "opencode_chat_turn2.json": ("opencode", "chat"),
    "codex_responses_turn2.json": ("codex", "responses"),
    "claude_messages_turn2.json": ("claude-code", "messages"),
    "miniswe_chat_turn2.json": ("mini-swe-agent", "chat"),
    "aider_chat.json": ("aider", "chat"),
    "openai_agents_responses_turn2.json": ("openai-agents", "responses"),
    "smolagents_toolcalling_turn2.json": ("smolagents", "chat"),
}
FAMILIES = ("qwen3", "qwen3_5", "llama3_1", "deepseek_v3")
THOUGHT = "The user wants this done; one step will do it."


class Replies:
    def __init__(self) -> None:
        self.queue: list[str] = []

    def __call__(self, context: dict[str, Any]) -> str:
        return self.queue.pop(0)


class Gateway:
    """One in-process gateway on a family's scored model, native format, recording into SQLite."""

    def __init__(self, family: str, where: Path) -> None:
        from starlette.testclient import TestClient

        from forge_cli.engine.scripted import ScriptedEngine
        from forge_cli.gateway.app import create_app
        from forge_cli.gateway.state import GatewayState
        from forge_cli.plugins import get_registry
        from forge_cli.pool.store import DataPool
        from tests.families import SPECS
        from tests.families.scored import scored_model

        registry = get_registry()
        self.replies = Replies()
        self.engine = ScriptedEngine(scored_model(family, where / "models"), self.replies, max_model_len=32768)
        self.pool = DataPool.sqlite(where / f"{family}.sqlite")
        self.state = GatewayState(self.engine, self.engine.tokenizer, {n: e.value for n, e in registry.tool_formats.items()},
                                  reasoning_parsers={n: e.value for n, e in registry.reasoning_parsers.items()},
                                  default_tool_format=None, model_type=SPECS[family].model_type, pool=self.pool)
        self.client = TestClient(create_app(self.state))

    def post(self, key: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.client.post(path, json=body, headers={"Authorization": f"Bearer {key}", "x-api-key": key})
        if r.status_code != 200:
            raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
        return r.json()

    def completions(self, key: str) -> list[Any]:
        return self.pool.trajectory(self.state.sessions[self.state.by_key[key]].trajectory_id).completions

    def close(self) -> None:
        self.client.close()
        self.pool.close()


def _split(api: str, body: dict[str, Any]) -> tuple[dict[str, Any], Any, list[Any], list[Any]]:
    """(the first request: the body cut before its last assistant turn, not streamed; the route's
    parsed request; its turns; its tools)."""
    from forge_cli.gateway.protocol.anthropic import MessagesRequest
    from forge_cli.gateway.protocol.openai_chat import ChatCompletionRequest
    from forge_cli.gateway.protocol.responses import ResponsesRequest
    from forge_cli.gateway.render import Tool
    from forge_cli.gateway.routes import chat, messages, responses

    body = {**body, "stream": False}
    body.pop("stream_options", None)
    if isinstance(body.get("tools"), list):  # the capture trimmed some lists to a note string
        body["tools"] = [t for t in body["tools"] if isinstance(t, dict)]
    if api == "chat":
        items = body["messages"]
        cut = max(i for i, m in enumerate(items) if m["role"] == "assistant")
        req = ChatCompletionRequest.model_validate(body)
        turns = chat.to_turns(req.messages)
        tools = [Tool(t.function.name, t.function.description or "", t.function.parameters or {"type": "object", "properties": {}})
                 for t in (req.tools or [])]
        return {**body, "messages": items[:cut]}, req, turns, tools
    if api == "responses":
        items = body["input"]
        last = max(i for i, m in enumerate(items) if m.get("type") in ("function_call", "reasoning") or m.get("role") == "assistant")
        cut = last
        while cut > 0 and items[cut - 1].get("type") in ("function_call", "reasoning"):
            cut -= 1
        req = ResponsesRequest.model_validate(body)
        return {**body, "input": items[:cut]}, req, responses.to_turns(req), responses.to_tools(req)[0]
    items = body["messages"]
    cut = max(i for i, m in enumerate(items) if m["role"] == "assistant")
    req = MessagesRequest.model_validate(body)
    return {**body, "messages": items[:cut]}, req, messages.to_turns(req), messages.to_tools(req)


def replay_agent(gw: Gateway, fixture: str) -> dict[str, Any]:
    """One agent's captured second request, with the first answered by the model in its own syntax."""
    from forge_cli.gateway.render import template_messages
    from tests.families import completion_text

    agent, api = AGENTS[fixture]
    captured = json.loads((FIXTURES / fixture).read_text())
    path = captured["path"].split("?")[0]
    first, _, turns, tools = _split(api, captured["body"])
    k = max(i for i, t in enumerate(turns) if t.role == "assistant")
    conversation, schemas = template_messages(turns[: k + 1], tools)
    conversation[-1]["reasoning_content"] = THOUGHT  # a thinking model thinks first (the agent will not send it back)
    gw.replies.queue.append(completion_text("qwen3", conversation, schemas))  # the model's own text for that turn
    key = f"agent-{agent}"
    gw.post(key, path, first)
    gw.replies.queue.append("Done.")
    second = {**captured["body"], "stream": False, "tools": first.get("tools")}
    second.pop("stream_options", None)
    gw.post(key, path, {k: v for k, v in second.items() if v is not None})
    one, two = gw.completions(key)
    return {"agent": agent, "api": api, "kind": two.history.kind, "at": two.history.at, "cause": _cause(gw, one, two),
            "prompt_tokens": len(two.prompt_ids), "sampled_tokens": len(one.output_ids)}


def _cause(gw: Gateway, one: Any, two: Any) -> str | None:
    """Why a second prompt drifted: the template dropped the sampled thinking (the first prompt and
    the whole answer after the thinking, to its end of turn, are there; the thinking is not), or the
    agent sent its turn back changed (an answer cut at the agent's stop string it then completes
    itself, calls it writes back as text)."""
    if two.history.kind != "drifted":
        return None
    tok = gw.state.tokenizer
    sampled = tok.decode(one.output_ids)
    ended = one.output_ids[-1:] == [tok.eos_token_id]
    without_thinking = tok.decode(one.prompt_ids) + sampled.split("</think>", 1)[-1].lstrip("\n")
    if ended and "</think>" in sampled and tok.decode(two.prompt_ids).startswith(without_thinking):
        return "the template drops earlier thinking"
    return "the agent rewrites its turn"


def family_conversation(gw: Gateway, family: str) -> dict[str, Any]:
    """Tool call (with thinking where the family thinks) → tool result → a new question."""
    from tests.families import completion_text

    thinks = family in ("qwen3", "qwen3_5")
    tool = {"type": "function", "function": {"name": "ls", "description": "List a folder.",
                                             "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
    user = {"role": "user", "content": "What is in /tmp?"}
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": {"path": "/tmp"}}}]}
    if thinks:
        call["reasoning_content"] = "A listing will tell."
    key = f"family-{family}"
    gw.replies.queue.append(completion_text(family, [user, call], [tool]))
    first = gw.post(key, "/v1/chat/completions", {"model": "m", "messages": [user], "tools": [tool]})["choices"][0]["message"]
    sent = {k: v for k, v in first.items() if k in ("role", "content", "tool_calls", "reasoning_content")}
    result = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "a.txt"}
    gw.replies.queue.append("One file: a.txt.")
    second = gw.post(key, "/v1/chat/completions", {"model": "m", "messages": [user, sent, result], "tools": [tool]})
    answer = {k: v for k, v in second["choices"][0]["message"].items() if k in ("role", "content", "reasoning_content")}
    gw.replies.queue.append("Nothing else.")
    gw.post(key, "/v1/chat/completions", {"model": "m", "messages": [user, sent, result, answer, {"role": "user", "content": "And /var?"}],
                                          "tools": [tool]})
    one, two, three = gw.completions(key)
    return {"family": family, "tool_parser": gw.state.formats.tool_parser, "reasoning_parser": gw.state.formats.reasoning_name,
            "tool_loop": two.history.kind, "new_question": three.history.kind, "drift_at": three.history.at,
            "first_output_at": len(one.prompt_ids)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results" / "drift.json")
    args = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    rows_agents, rows_families = [], []
    with tempfile.TemporaryDirectory() as tmp:
        gw = Gateway("qwen3", Path(tmp) / "agents")
        try:
            rows_agents = [replay_agent(gw, fixture) for fixture in AGENTS]
        finally:
            gw.close()
        for family in FAMILIES:
            gw = Gateway(family, Path(tmp) / family)
            try:
                rows_families.append(family_conversation(gw, family))
            finally:
                gw.close()
    console = Console()
    table = Table("agent", "API", "second request", "drifted at", "prompt tokens", "why", title="token drift: agents on Qwen3 (native)")
    for r in rows_agents:
        table.add_row(r["agent"], r["api"], r["kind"], "–" if r["at"] is None else str(r["at"]), str(r["prompt_tokens"]), r["cause"] or "")
    console.print(table)
    table = Table("family", "tool parser", "reasoning parser", "tool loop", "new question", "drifted at", "first sampled token",
                  title="token drift: families")
    for r in rows_families:
        table.add_row(r["family"], r["tool_parser"], r["reasoning_parser"] or "–", r["tool_loop"], r["new_question"],
                      "–" if r["drift_at"] is None else str(r["drift_at"]), str(r["first_output_at"]))
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"agents": rows_agents, "families": rows_families}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
