"""``previous_response_id`` on ``POST /v1/responses``: an agent that keeps its conversation on the
server (``store`` true, then only the new input items with the previous response's id) gets the
prompt it would have got sending the whole conversation; the state is its session's own (another
session's id, a ``store: false`` one, an evicted or unknown one: OpenAI's 404), freed with it."""

from __future__ import annotations

import httpx
import openai
import pytest

from forge_cli.gateway.routes import responses as route
from tests.test_gateway_chat import stack  # noqa: F401  # a live gateway on the scripted engine, with a pool and admin key

ADMIN = {"Authorization": "Bearer admin-secret"}
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def session(live, key):
    return live.state.sessions[live.state.by_key[key]]


def recorded(stack, key):
    live, _, pool = stack
    return pool.trajectory(session(live, key).trajectory_id).completions


def create(client, streamed, **kw):
    """One Responses call, streamed or not: the final response (and, streamed, the first event's)."""
    if not streamed:
        return client.responses.create(model="forge", **kw)
    events = list(client.responses.create(model="forge", stream=True, **kw))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert events[0].response.previous_response_id == kw.get("previous_response_id")
    return events[-1].response


def not_found(response_id):
    return {"error": {"message": f"Previous response with id '{response_id}' not found.", "type": "invalid_request_error",
                      "param": "previous_response_id", "code": "previous_response_not_found"}}


@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_loop_through_previous_response_id_is_the_full_conversation(stack, streamed):
    """Call, tool output by ``previous_response_id``: the second prompt's ids are the ones the same
    conversation sent in full gives, and they continue the first completion's exact ids."""
    live, replies, _ = stack
    key = f"prev-loop-{streamed}"
    client = live.openai(key)
    replies.queue.append(f"Checking.\n{CALL}")
    r1 = create(client, streamed, instructions="Be useful.", input="Weather in Paris?", tools=TOOLS)
    assert r1.previous_response_id is None
    [call] = [o for o in r1.output if o.type == "function_call"]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}
    replies.queue.append("It is sunny.")
    r2 = create(client, streamed, instructions="Be useful.", previous_response_id=r1.id, input=[result], tools=TOOLS)
    assert r2.previous_response_id == r1.id and r2.output_text == "It is sunny." and r2.id != r1.id

    replies.queue.append("It is sunny.")  # the same conversation, sent in full, in another session
    full = [{"type": "message", "role": "user", "content": "Weather in Paris?"}, *[o.to_dict() for o in r1.output], result]
    live.openai(f"{key}-full").responses.create(model="forge", instructions="Be useful.", input=full, tools=TOOLS)

    first, second = recorded(stack, key)
    [whole] = recorded(stack, f"{key}-full")
    assert second.prompt_ids == whole.prompt_ids
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.output_ids)] == first.prompt_ids + first.output_ids
    assert first.history.kind == "first" and second.history.kind in ("exact", "reused")
    prompt = live.state.tokenizer.decode(second.prompt_ids)
    assert prompt.count("Be useful.") == 1 and "Weather in Paris?" in prompt and "sunny, 21 C" in prompt
    assert set(session(live, key).responses) == {r1.id, r2.id}


def test_a_chain_of_three(stack):
    live, replies, _ = stack
    client = live.openai("prev-chain")
    ids = []
    for i, (asked, answer) in enumerate([("One?", "First."), ("Two?", "Second."), ("Three?", "Third.")]):
        replies.queue.append(answer)
        r = client.responses.create(model="forge", input=asked, **({"previous_response_id": ids[-1]} if ids else {}))
        assert r.output_text == answer and r.previous_response_id == (ids[-1] if ids else None)
        ids.append(r.id)
    *_, third = recorded(stack, "prev-chain")
    prompt = live.state.tokenizer.decode(third.prompt_ids)
    at = [prompt.index(text) for text in ("One?", "First.", "Two?", "Second.", "Three?")]
    assert at == sorted(at) and third.history.kind in ("exact", "reused")
    replies.queue.append("Third.")  # the same three turns in full: the same prompt
    full = [{"role": "user", "content": "One?"}, {"role": "assistant", "content": "First."},
            {"role": "user", "content": "Two?"}, {"role": "assistant", "content": "Second."}, {"role": "user", "content": "Three?"}]
    live.openai("prev-chain-full").responses.create(model="forge", input=full)
    [whole] = recorded(stack, "prev-chain-full")
    assert whole.prompt_ids == third.prompt_ids


def test_instructions_are_not_carried_over(stack):
    """OpenAI's rule: a continuation has its own instructions, or none."""
    live, replies, _ = stack
    client = live.openai("prev-instr")
    replies.queue.append("Hello.")
    r1 = client.responses.create(model="forge", instructions="SPEAK LIKE A PIRATE.", input="Hi?")
    replies.queue.append("Bye.")
    r2 = client.responses.create(model="forge", previous_response_id=r1.id, input="Bye?")
    replies.queue.append("Later.")
    client.responses.create(model="forge", previous_response_id=r2.id, instructions="Be brief.", input="Later?")
    first, second, third = (live.state.tokenizer.decode(c.prompt_ids) for c in recorded(stack, "prev-instr"))
    assert "SPEAK LIKE A PIRATE." in first and "SPEAK LIKE A PIRATE." not in second and r2.instructions is None
    assert "Be brief." in third and "SPEAK LIKE A PIRATE." not in third and "Hi?" in third and "Bye." in third


@pytest.mark.parametrize("streamed", [False, True])
def test_another_sessions_id_and_an_unknown_id_are_404(stack, streamed):
    live, replies, _ = stack
    owner, other = f"prev-owner-{streamed}", f"prev-other-{streamed}"
    replies.queue.append("Mine.")
    mine = live.openai(owner).responses.create(model="forge", input="Hi?")
    for key, response_id in ((other, mine.id), (owner, "resp_nope")):
        with pytest.raises(openai.NotFoundError) as caught:
            live.openai(key).responses.create(model="forge", input="Go on.", previous_response_id=response_id, stream=streamed)
        assert caught.value.response.json() == not_found(response_id)
    raw = httpx.post(f"{live.url}/v1/responses", headers={"Authorization": f"Bearer {other}"},
                     json={"input": "Go on.", "previous_response_id": mine.id, "stream": streamed})
    assert raw.status_code == 404 and raw.json() == not_found(mine.id)
    assert [c.history.kind for c in recorded(stack, owner)] == ["first"]  # the refused calls recorded nothing
    assert recorded(stack, other) == []


def test_store_false_is_not_remembered(stack):
    live, replies, _ = stack
    client = live.openai("prev-nostore")
    replies.queue.append("Not kept.")
    r = client.responses.create(model="forge", input="Hi?", store=False)
    assert r.id not in session(live, "prev-nostore").responses
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="forge", input="Go on.", previous_response_id=r.id)
    assert caught.value.response.json() == not_found(r.id)
    replies.queue.append("Kept.")
    kept = client.responses.create(model="forge", input="Hi?", store=True)
    replies.queue.append("Continued.")  # a store: false continuation of a kept response works, and is not kept itself
    r2 = client.responses.create(model="forge", input="Go on.", previous_response_id=kept.id, store=False)
    assert r2.output_text == "Continued." and set(session(live, "prev-nostore").responses) == {kept.id}


def test_a_session_keeps_its_last_responses_and_frees_them_when_forgotten(stack, monkeypatch):
    live, replies, _ = stack
    monkeypatch.setattr(route, "MAX_KEPT", 2)
    made = httpx.post(f"{live.url}/admin/sessions", headers=ADMIN, json={}).json()
    client = openai.OpenAI(base_url=made["base_url"], api_key="ignored-by-the-url", max_retries=0)
    ids = []
    for answer in ("A.", "B.", "C."):
        replies.queue.append(answer)
        ids.append(client.responses.create(model="forge", input="Next?").id)
    held = live.state.sessions[made["session"]]
    assert list(held.responses) == ids[1:]  # the oldest forgotten
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="forge", input="Go on.", previous_response_id=ids[0])
    replies.queue.append("D.")
    assert client.responses.create(model="forge", input="Go on.", previous_response_id=ids[1]).output_text == "D."
    gone = httpx.delete(f"{live.url}/admin/sessions/{made['session']}", headers=ADMIN)
    assert gone.status_code == 200 and held.responses == {}
