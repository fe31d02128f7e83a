"""The Gemini API (``/v1beta/models/…``) against a live gateway over a scripted policy.

Driven by Google's own SDK (google-genai): text, streaming, a tool loop, thinking, countTokens,
the models list. Read raw (``httpx``), every body, SSE event and streamed-array chunk is
google-genai's own type, validated strictly (its models forbid unknown keys) and re-dumped to
exactly what was sent. A Gemini request records the prompt a chat request with the same
conversation records, id for id; errors come in Google's shape and name the field; the key may be
``x-goog-api-key``, ``?key=``, a bearer token or the ``/s/<session>`` URL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import models as genai_models
from google.genai import types
from pydantic import BaseModel

from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.gateway.routes.gemini import gemini_json
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from forge_cli.specs import ReasoningParser
from tests.conftest import LiveGateway, tool_formats
from tests.test_gateway_chat import Replies

GENERATE = "/v1beta/models/forge:generateContent"
STREAM = "/v1beta/models/forge:streamGenerateContent"
COUNT = "/v1beta/models/forge:countTokens"
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {"name": "get_weather", "description": "Weather in a city.",
           "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}}
WEATHER_JSON_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
USER = {"role": "user", "parts": [{"text": "Weather in Paris?"}]}
FIXTURES = Path(__file__).parent / "fixtures" / "gemini"


class ThinkTags(ReasoningParser):
    """``<think>…</think>`` before the answer: a reasoning parser the tiny model's tokenizer can use."""

    name = "think-tags"
    description = "Thinking between <think> and </think>."
    start = "<think>"
    end = "</think>"

    def split(self, text: str) -> tuple[str, str]:
        if not text.lstrip().startswith(self.start) or self.end not in text:
            return "", text
        thought, _, answer = text.lstrip()[len(self.start):].partition(self.end)
        return thought, answer


@pytest.fixture(scope="module")
def stack(tiny_model, tmp_path_factory):
    replies = Replies()
    engine = ScriptedEngine(tiny_model, replies)
    pool = DataPool.sqlite(tmp_path_factory.mktemp("gemini") / "pool.sqlite")
    state = GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, admin_key="admin-secret",
                         reasoning_parsers={"think-tags": ThinkTags()}, reasoning_parser="think-tags")
    live = LiveGateway(state)
    yield live, replies, pool
    live.stop()
    pool.close()


def recorded(stack, key: str) -> list[Any]:
    live, _, pool = stack
    return pool.trajectory(live.state.sessions[live.state.by_key[key]].trajectory_id).completions


def gemini(live, key: str, base: str | None = None) -> genai.Client:
    """Google's client, pointed at the gateway (``base``: a ``/s/<session>`` URL)."""
    return genai.Client(api_key=key, http_options=types.HttpOptions(base_url=base or live.url, api_version="v1beta",
                                                                    retry_options=types.HttpRetryOptions(attempts=1)))


def post(live, path: str, body: dict[str, Any], key: str, status: int = 200) -> httpx.Response:
    r = httpx.post(f"{live.url}{path}", json=body, headers={"x-goog-api-key": key}, timeout=60)
    assert r.status_code == status, r.text[:500]
    return r


def conforms(kind: type[BaseModel], data: dict[str, Any]) -> Any:
    """``data`` as the SDK's type, strictly: JSON's types, no key the type does not name (its models
    forbid extras), and the API's dump of what was parsed is exactly what was sent."""
    parsed = kind.model_validate_json(json.dumps(data), strict=True)
    assert gemini_json(parsed) == data
    return parsed


def sse_chunks(r: httpx.Response) -> list[dict[str, Any]]:
    assert r.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in r.text.split("\n\n") if b.strip()]
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks), r.text[:300]
    return [json.loads(b[len("data: "):]) for b in blocks]


# ---- Google's SDK -------------------------------------------------------------------------------------


def test_text_usage_and_what_is_recorded(stack):
    live, replies, _ = stack
    replies.queue.append("Sunny, 21 C.")
    config = types.GenerateContentConfig(system_instruction="You help.", temperature=0.5, top_p=0.9, top_k=40, max_output_tokens=32,
                                         seed=7, stop_sequences=["zz"], presence_penalty=0.5)
    client = gemini(live, "g-text")  # held: a client that is collected closes its connection
    r = client.models.generate_content(model="forge", contents="Weather in Paris?", config=config)
    assert r.text == "Sunny, 21 C." and r.candidates[0].finish_reason == types.FinishReason.STOP
    assert r.model_version == "forge" and r.response_id
    [c] = recorded(stack, "g-text")
    usage = r.usage_metadata
    assert usage.prompt_token_count == len(c.prompt_ids) and usage.candidates_token_count == len(c.output_ids)
    assert usage.total_token_count == len(c.prompt_ids) + len(c.output_ids) and usage.thoughts_token_count is None
    assert (c.sampling.temperature, c.sampling.top_p, c.sampling.max_tokens, c.sampling.seed, c.sampling.stop) == (0.5, 0.9, 32, 7, ("zz",))
    assert c.sampling.asked == {"temperature": 0.5, "top_p": 0.9, "top_k": 40, "max_output_tokens": 32, "seed": 7,
                                "stop_sequences": ["zz"], "presence_penalty": 0.5}  # top_k and the penalty: asked, not applied
    prompt = live.state.tokenizer.decode(c.prompt_ids)
    assert "You help." in prompt and "Weather in Paris?" in prompt


def test_stream_and_max_tokens(stack):
    live, replies, _ = stack
    client = gemini(live, "g-stream")
    replies.queue.append("A streamed answer of some length, in pieces.")
    chunks = list(client.models.generate_content_stream(model="forge", contents="Talk."))
    assert "".join(c.text or "" for c in chunks) == "A streamed answer of some length, in pieces."
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP and all(c.candidates[0].finish_reason is None
                                                                                   for c in chunks[:-1])
    [c] = recorded(stack, "g-stream")
    assert chunks[-1].usage_metadata.candidates_token_count == len(c.output_ids)
    replies.queue.append("a reply much longer than two tokens")
    short = client.models.generate_content(model="forge", contents="Talk.", config=types.GenerateContentConfig(max_output_tokens=2))
    assert short.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS and short.usage_metadata.candidates_token_count == 2


@pytest.mark.parametrize("streamed", [False, True])
def test_tool_loop(stack, streamed):
    """A declaration (Google's schema, types in capitals) → the policy calls it → the SDK sees a
    FunctionCall → its functionResponse goes back → the answer; the prompt holds the result."""
    live, replies, _ = stack
    key = f"g-tools-{streamed}"
    client = gemini(live, key)
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**WEATHER)])])
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])]

    def ask() -> types.Content:
        if not streamed:
            return client.models.generate_content(model="forge", contents=contents, config=config).candidates[0].content
        chunks = list(client.models.generate_content_stream(model="forge", contents=contents, config=config))
        return types.Content(role="model", parts=[p for c in chunks for p in c.candidates[0].content.parts if p.text or p.function_call])

    replies.queue.append(f"I will check.\n{CALL}")
    turn = ask()
    [call] = [p.function_call for p in turn.parts if p.function_call]
    assert call.name == "get_weather" and call.args == {"city": "Paris"} and call.id
    assert "".join(p.text or "" for p in turn.parts) == "I will check."
    contents += [turn, types.Content(role="user", parts=[types.Part.from_function_response(name="get_weather",
                                                                                          response={"output": "sunny, 21 C"})])]
    replies.queue.append("It is sunny.")
    answer = ask()
    assert "".join(p.text or "" for p in answer.parts) == "It is sunny."
    first, second = recorded(stack, key)
    tok = live.state.tokenizer
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in tok.decode(second.prompt_ids)
    assert first.tool_calls == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids


def test_forced_and_refused_tools(stack):
    """``ANY`` with one allowed name forces that tool; ``NONE`` offers none: as chat's tool_choice renders them."""
    live, replies, _ = stack
    tools = [{"functionDeclarations": [WEATHER, {"name": "get_time", "parametersJsonSchema": {"type": "object", "properties": {}}}]}]
    body = {"contents": [USER], "tools": tools, "generationConfig": {"maxOutputTokens": 64}}
    for mode, key in (({"mode": "ANY", "allowedFunctionNames": ["get_weather"]}, "g-any"), ({"mode": "NONE"}, "g-none")):
        replies.queue.append("ok")
        post(live, GENERATE, {**body, "toolConfig": {"functionCallingConfig": mode}}, key)
    tok = live.state.tokenizer
    forced, refused = tok.decode(recorded(stack, "g-any")[0].prompt_ids), tok.decode(recorded(stack, "g-none")[0].prompt_ids)
    assert "You must call the tool get_weather." in forced
    assert "get_time" not in forced  # allowedFunctionNames narrows what is offered
    assert "get_weather" not in refused


def test_thinking(stack):
    """The reasoning parser's split: a ``thought`` part before the answer when includeThoughts, none
    without; counted in thoughtsTokenCount either way; streamed thoughts come first."""
    live, replies, _ = stack
    client = gemini(live, "g-think")
    reply = "<think>The user wants the weather.</think>It is sunny."
    thinking = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=1024))
    replies.queue.append(reply)
    r = client.models.generate_content(model="forge", contents="Weather?", config=thinking)
    thought, answer = r.candidates[0].content.parts
    assert (thought.thought, thought.text) == (True, "The user wants the weather.") and answer.text == "It is sunny." and not answer.thought
    assert r.text == "It is sunny." and 0 < r.usage_metadata.thoughts_token_count < len(recorded(stack, "g-think")[0].output_ids)
    usage = r.usage_metadata
    assert usage.thoughts_token_count + usage.candidates_token_count + usage.prompt_token_count == usage.total_token_count
    replies.queue.append(reply)
    plain = client.models.generate_content(model="forge", contents="Weather?")
    assert [p.text for p in plain.candidates[0].content.parts] == ["It is sunny."] and plain.usage_metadata.thoughts_token_count > 0
    replies.queue.append(reply)
    chunks = list(client.models.generate_content_stream(model="forge", contents="Weather?", config=thinking))
    parts = [p for c in chunks for p in c.candidates[0].content.parts if p.text]
    kinds = [bool(p.thought) for p in parts]
    assert kinds == sorted(kinds, reverse=True) and kinds[0]  # thoughts, then the answer
    assert "".join(p.text for p in parts if p.thought) == "The user wants the weather."
    assert "".join(p.text for p in parts if not p.thought) == "It is sunny."
    # the thinking sent back in a model turn is accepted (and dropped from the text, as the template renders it)
    replies.queue.append("Yes.")
    history = [types.Content(role="user", parts=[types.Part(text="Weather?")]), r.candidates[0].content,
               types.Content(role="user", parts=[types.Part(text="Sure?")])]
    assert client.models.generate_content(model="forge", contents=history).text == "Yes."


def test_count_tokens_is_the_recorded_prompt_length(stack):
    live, replies, _ = stack
    client = gemini(live, "g-count")
    sessions = len(live.state.sessions)
    counted = client.models.count_tokens(model="forge", contents="Weather in Paris?")
    assert len(live.state.sessions) == sessions  # counting opens no trajectory
    replies.queue.append("Sunny.")
    client.models.generate_content(model="forge", contents="Weather in Paris?")
    [c] = recorded(stack, "g-count")
    assert counted.total_tokens == len(c.prompt_ids) > 0
    # with a system instruction and tools: the whole request, as countTokens' generateContentRequest
    whole = {"model": "models/forge", "systemInstruction": {"parts": [{"text": "You help."}]}, "contents": [USER],
             "tools": [{"functionDeclarations": [WEATHER]}]}
    replies.queue.append("Sunny.")
    post(live, GENERATE, whole, "g-count-whole")
    counted_whole = conforms(types.CountTokensResponse, post(live, COUNT, {"generateContentRequest": whole}, "g-count-whole").json())
    assert counted_whole.total_tokens == len(recorded(stack, "g-count-whole")[0].prompt_ids) > counted.total_tokens


def test_models(stack):
    live, _, _ = stack
    client = gemini(live, "g-models")
    [listed] = list(client.models.list())
    assert listed.name == "models/forge" and "generateContent" in listed.supported_actions
    assert listed.input_token_limit == live.state.engine.max_model_len
    assert client.models.get(model="gemini-2.5-flash").name == "models/gemini-2.5-flash"
    # raw: the API's field names (supportedGenerationMethods), each model the SDK's Model exactly
    data = httpx.get(f"{live.url}/v1beta/models", timeout=30).json()
    assert set(data) == {"models"}
    for raw in data["models"]:
        read = genai_models._Model_from_mldev(raw)  # the SDK's own reading of the API's model
        read.pop("tuned_model_info")  # which it fills with the whole object (and then drops as extras)
        model = types.Model.model_validate(read, strict=True)
        again = gemini_json(model)
        again["supportedGenerationMethods"] = again.pop("supportedActions")
        assert again == raw and model.thinking is True
    assert httpx.get(f"{live.url}/v1beta/models/forge:generateContent", timeout=30).json()["error"]["code"] == 405


# ---- the wire, strictly -------------------------------------------------------------------------------


@pytest.mark.parametrize("reply", [f"I will check.\n{CALL}", "<think>Hmm.</think>It is sunny.", "", CALL])
def test_bodies_and_chunks_conform(stack, reply):
    """The body, each SSE event and each chunk of the streamed array is a GenerateContentResponse;
    the stream's text and calls add up to the body's; logprobs are the recorded ones."""
    live, replies, _ = stack
    key = f"g-wire-{len(reply)}"
    body = {"contents": [USER], "tools": [{"functionDeclarations": [WEATHER]}],
            "generationConfig": {"maxOutputTokens": 64, "responseLogprobs": True, "logprobs": 2,
                                 "thinkingConfig": {"includeThoughts": True}}}
    replies.queue.append(reply)
    whole = conforms(types.GenerateContentResponse, post(live, GENERATE, body, key).json())
    [candidate] = whole.candidates
    [c] = recorded(stack, key)
    chosen = candidate.logprobs_result.chosen_candidates
    assert [x.log_probability for x in chosen] == pytest.approx(c.output_logprobs) and [x.token_id for x in chosen] == c.output_ids
    assert all(len(top.candidates) == 2 for top in candidate.logprobs_result.top_candidates)
    assert candidate.avg_logprobs == pytest.approx(sum(c.output_logprobs) / len(c.output_logprobs))

    def summary(parts: list[types.Part]) -> tuple[str, str, list[tuple[str, dict]]]:
        return ("".join(p.text for p in parts if p.text and p.thought), "".join(p.text for p in parts if p.text and not p.thought),
                [(p.function_call.name, p.function_call.args) for p in parts if p.function_call])

    for form in ("?alt=sse", ""):
        replies.queue.append(reply)
        r = post(live, STREAM + form, body, key)
        chunks = sse_chunks(r) if form else json.loads(r.text)
        parsed = [conforms(types.GenerateContentResponse, chunk) for chunk in chunks]
        assert len({p.response_id for p in parsed}) == 1 and parsed[-1].candidates[0].finish_reason == candidate.finish_reason
        streamed = summary([p for chunk in parsed for p in chunk.candidates[0].content.parts])
        assert streamed == summary(candidate.content.parts)
        assert parsed[-1].usage_metadata.model_dump() == whole.usage_metadata.model_dump()


def test_several_candidates(stack):
    live, replies, _ = stack
    body = {"contents": [USER], "generationConfig": {"candidateCount": 2, "maxOutputTokens": 16}}
    replies.queue.extend(["One.", "Two."])
    whole = conforms(types.GenerateContentResponse, post(live, GENERATE, body, "g-n").json())
    assert [(c.index, c.content.parts[0].text) for c in whole.candidates] == [(0, "One."), (1, "Two.")]
    replies.queue.extend(["One.", "Two."])
    [chunk] = [conforms(types.GenerateContentResponse, c) for c in sse_chunks(post(live, STREAM + "?alt=sse", body, "g-n"))]
    assert [c.content.parts[0].text for c in chunk.candidates] == ["One.", "Two."]
    assert len(recorded(stack, "g-n")) == 4 and {c.sampling.n for c in recorded(stack, "g-n")} == {2}  # each candidate is a completion


@pytest.mark.parametrize("snake", [False, True])
def test_the_prompt_is_the_chat_apis(stack, snake):
    """The same conversation sent to generateContent (camelCase or snake_case) and to chat completions
    records the same prompt ids and output ids: one rendering, whatever the API."""
    live, replies, _ = stack
    body: dict[str, Any] = {
        "systemInstruction": {"parts": [{"text": "You help."}]},
        "contents": [USER,
                     {"role": "model", "parts": [{"text": "I will check."},
                                                 {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"}}]},
                     {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "id": "c1", "response": {"output": "sunny"}}},
                                                {"text": "And tomorrow?"}]}],
        "tools": [{"functionDeclarations": [WEATHER]}],
        "generationConfig": {"maxOutputTokens": 64, "temperature": 0.7},
    }
    if snake:
        text = json.dumps(body)
        for camel, snake_name in (("systemInstruction", "system_instruction"), ("functionCall", "function_call"),
                                  ("functionResponse", "function_response"), ("functionDeclarations", "function_declarations"),
                                  ("generationConfig", "generation_config"), ("maxOutputTokens", "max_output_tokens")):
            text = text.replace(f'"{camel}"', f'"{snake_name}"')
        body = json.loads(text)
    chat = {"model": "forge", "max_tokens": 64, "temperature": 0.7,
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                                        "parameters": WEATHER_JSON_SCHEMA}}],
            "messages": [{"role": "system", "content": "You help."}, {"role": "user", "content": "Weather in Paris?"},
                         {"role": "assistant", "content": "I will check.", "tool_calls": [
                             {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                         {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"},
                         {"role": "user", "content": "And tomorrow?"}]}
    replies.queue.extend(["Rain.", "Rain."])
    post(live, GENERATE, body, f"g-same-{snake}")
    r = httpx.post(f"{live.url}/v1/chat/completions", json=chat, headers={"Authorization": f"Bearer c-same-{snake}"}, timeout=60)
    assert r.status_code == 200, r.text
    [mine], [theirs] = recorded(stack, f"g-same-{snake}"), recorded(stack, f"c-same-{snake}")
    assert mine.prompt_ids == theirs.prompt_ids and mine.output_ids == theirs.output_ids
    assert mine.sampling.temperature == theirs.sampling.temperature == 0.7
    assert mine.sampling.asked == {"max_output_tokens": 64, "temperature": 0.7}  # as sent, in either spelling


def test_what_gemini_cli_sends(stack):
    """gemini-cli's second turn (16 declarations with parametersJsonSchema, a thoughtSignature on its
    functionCall, thinkingConfig), replayed: each part lands where it belongs in the prompt."""
    live, replies, _ = stack
    captured = json.loads((FIXTURES / "gemini_cli_turn2.json").read_text())
    replies.queue.append("The folder holds a.txt.")
    r = httpx.post(f"{live.url}{captured['path']}", json=captured["body"], headers={"x-goog-api-key": "g-cli"}, timeout=60)
    assert r.status_code == 200, r.text[:500]
    chunks = [conforms(types.GenerateContentResponse, c) for c in sse_chunks(r)]
    assert "".join(p.text or "" for c in chunks for p in c.candidates[0].content.parts) == "The folder holds a.txt."
    [c] = recorded(stack, "g-cli")
    prompt = live.state.tokenizer.decode(c.prompt_ids)
    assert "Directory listing for /home/user/work:\na.txt (6 bytes)" in prompt and '"name": "run_shell_command"' in prompt
    assert c.sampling.asked == {"temperature": 1, "top_p": 0.95, "top_k": 64}


# ---- keys and errors ----------------------------------------------------------------------------------


def test_keys(stack):
    """x-goog-api-key (the SDK's), ?key=, a bearer token and the /s/<session> URL each name the trajectory."""
    live, replies, pool = stack
    body = {"contents": [USER]}
    for headers, params, key in (({"x-goog-api-key": "k-header"}, {}, "k-header"), ({}, {"key": "k-query"}, "k-query"),
                                 ({"authorization": "Bearer k-bearer"}, {}, "k-bearer")):
        replies.queue.append("ok")
        assert httpx.post(f"{live.url}{GENERATE}", json=body, headers=headers, params=params, timeout=60).status_code == 200
        assert len(recorded(stack, key)) == 1
    made = httpx.post(f"{live.url}/admin/sessions", headers={"Authorization": "Bearer admin-secret"}, json={}, timeout=30).json()
    replies.queue.append("Via the session URL.")
    client = gemini(live, "ignored-by-the-path", base=f"{live.url}/s/{made['session']}")
    r = client.models.generate_content(model="forge", contents="hi")
    assert r.text == "Via the session URL."
    assert len(pool.trajectory(made["trajectory_id"]).completions) == 1
    missing = httpx.post(f"{live.url}{GENERATE}", json=body, timeout=30)
    assert missing.status_code == 401 and missing.json()["error"]["status"] == "UNAUTHENTICATED"


TEXT = [{"text": "x"}]
BAD = [
    ({"contents": []}, "contents"),
    ({"contents": "hi"}, "contents"),
    ({"contents": [{"role": "robot", "parts": TEXT}]}, "contents[0].role"),
    ({"contents": [{"role": "user", "parts": []}]}, "contents[0].parts"),
    ({"contents": [{"role": "user", "parts": [{}]}]}, "contents[0].parts[0]"),
    ({"contents": [{"parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}]}]}, "inlineData"),
    ({"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]}, "functionResponse"),
    ({"contents": [{"role": "user", "parts": [{"functionCall": {"name": "f", "args": {}}}]}]}, "contents[0].parts[0]"),
    ({"contents": [{"parts": [{"text": 5}]}]}, "contents[0].parts[0].text"),
    ({"contents": [{"parts": TEXT}], "generationConfig": {"maxOutputTokens": 0}}, "generationConfig.maxOutputTokens"),
    ({"contents": [{"parts": TEXT}], "generationConfig": {"temperature": "hot"}}, "generationConfig.temperature"),
    ({"contents": [{"parts": TEXT}], "generationConfig": {"stopSequences": ["a"] * 6}}, "generationConfig.stopSequences"),
    ({"contents": [{"parts": TEXT}], "generationConfig": {"logprobs": 2}}, "generationConfig.logprobs"),
    ({"contents": [{"parts": TEXT}], "generationConfig": {"responseMimeType": "text/x.enum"}}, "responseMimeType"),
    ({"contents": [{"parts": TEXT}], "tools": [{"functionDeclarations": [WEATHER]}],
      "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["nope"]}}}, "allowedFunctionNames"),
    ({"contents": [{"parts": TEXT}], "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}}, "toolConfig.functionCallingConfig.mode"),
    ({"contents": [{"parts": TEXT}], "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "STRING"}}]}]}, "tools"),
    ({"contents": [{"parts": TEXT}], "cachedContent": "cachedContents/x"}, "cachedContent"),
    ({"systemInstruction": {"parts": TEXT}, "contents": [{"role": "user", "parts": [{"text": "hidden", "thought": True}]}]}, "contents"),
]


@pytest.mark.parametrize("body, field", BAD, ids=[f"{i}-{field}" for i, (_, field) in enumerate(BAD)])
def test_errors_name_the_field_in_googles_shape(stack, body, field):
    live, _, _ = stack
    r = post(live, GENERATE, body, "g-bad", status=400)
    assert gemini_error_ok(r) and r.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert field in r.json()["error"]["message"], r.json()


def test_errors_through_the_sdk_and_elsewhere(stack):
    live, _, _ = stack
    client = gemini(live, "g-bad-sdk")
    with pytest.raises(genai_errors.ClientError) as caught:
        client.models.generate_content(model="forge", contents="x", config=types.GenerateContentConfig(max_output_tokens=0))
    assert caught.value.code == 400 and "maxOutputTokens" in caught.value.message
    for path, body in ((COUNT, {}), (COUNT, {"contents": [USER], "generateContentRequest": {"contents": [USER]}}),
                       ("/v1beta/models/forge:embedContent", {"contents": [USER]})):
        r = httpx.post(f"{live.url}{path}", json=body, headers={"x-goog-api-key": "g-bad-2"}, timeout=30)
        assert r.status_code in (400, 404) and gemini_error_ok(r), r.text
    assert "/v1beta/models/{model}:generateContent" in httpx.get(f"{live.url}/openapi.json", timeout=30).json()["paths"]


# ---- for tests/test_gateway_fuzz.py -------------------------------------------------------------------

_FUZZ_TOOLS = [{"functionDeclarations": [
    {"name": "bash", "description": "Run.", "parameters": {"type": "OBJECT", "properties": {"command": {"type": "STRING"}},
                                                           "required": ["command"]}},
    {"name": "read", "parametersJsonSchema": {"type": "object", "properties": {"path": {"type": "string"}}}}]}]
_FUZZ_BODY = {
    "systemInstruction": {"role": "user", "parts": [{"text": "s"}]},
    "contents": [{"role": "user", "parts": [{"text": "hi"}]},
                 {"role": "model", "parts": [{"text": "plan", "thought": True}, {"text": "ok"},
                                             {"functionCall": {"name": "bash", "args": {"command": "ls"}, "id": "c"},
                                              "thoughtSignature": "c2ln"}]},
                 {"role": "user", "parts": [{"functionResponse": {"name": "bash", "id": "c", "response": {"output": "a.txt"}}},
                                            {"text": "next"}]}],
    "tools": _FUZZ_TOOLS,
    "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
    "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
    "generationConfig": {"temperature": 0.5, "topP": 0.9, "topK": 40, "maxOutputTokens": 8, "stopSequences": ["zz"], "seed": 1,
                         "candidateCount": 1, "responseLogprobs": True, "logprobs": 2,
                         "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 128}},
}
FUZZ_VALID: dict[str, dict[str, Any]] = {
    "/v1beta/models/forge:generateContent": _FUZZ_BODY,
    "/v1beta/models/forge:streamGenerateContent?alt=sse": _FUZZ_BODY,
    "/v1beta/models/forge:countTokens": {"generateContentRequest": {"model": "models/forge", **_FUZZ_BODY}},
}


def gemini_error_ok(response: httpx.Response) -> bool:
    """Whether a 4xx is in Google's shape: ``{"error": {"code": <the status>, "message": str, "status": str}}``."""
    try:
        data = response.json()
    except ValueError:
        return False
    err = data.get("error") if isinstance(data, dict) else None
    return (isinstance(err, dict) and set(err) == {"code", "message", "status"} and err["code"] == response.status_code
            and isinstance(err["message"], str) and bool(err["message"]) and isinstance(err["status"], str) and err["status"].isupper())


def gemini_stream_ok(text: str) -> bool:
    """Whether a streamGenerateContent?alt=sse body ends as Google's does: its last event's candidates carry a finishReason."""
    data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    return bool(data) and all(c.get("finishReason") for c in json.loads(data[-1]).get("candidates", [{}]))
