"""The gateway's HTTP surface under bad input and load: deep nesting, lone surrogates, non-finite
numbers, huge prompts, slow bodies, 500s on a keep-alive connection, HEAD, and latency metrics."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import httpx
import pytest
from fastapi import Request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_cli.engine.scripted import ScriptedEngine
from forge_cli.gateway import body as body_mod
from forge_cli.gateway.app import create_app
from forge_cli.gateway.errors import APIError
from forge_cli.gateway.limits import token_floor
from forge_cli.gateway.state import GatewayState
from forge_cli.pool.store import DataPool
from tests.conftest import LiveGateway, tool_formats

MSG = [{"role": "user", "content": "hi"}]
GENERATION = ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/v1/completions"]
ADMIN_POSTS = ["/admin/sessions", "/admin/sessions/x/finish", "/admin/weights"]


class Policy:
    """Replies "ok"; sleeps on "slow"; remembers every context it was given."""

    def __init__(self) -> None:
        self.contexts: list[dict] = []

    def __call__(self, context):
        self.contexts.append(context)
        if context["messages"] and context["messages"][-1]["content"] == "slow":
            time.sleep(0.6)
        return "ok"


class SpyTokenizer:
    """The real tokenizer, remembering the longest text it was asked to encode; ``slow_over``: texts
    longer than that wait until ``release`` is set (blocked, as a slow tokenizer that releases the GIL)."""

    def __init__(self, tok, slow_over: int | None = None) -> None:
        self._tok, self.slow_over = tok, slow_over
        self.longest = 0
        self.slow_started, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def __len__(self) -> int:
        return len(self._tok)

    def encode(self, text, **kw):
        self.longest = max(self.longest, len(text))
        if self.slow_over is not None and len(text) > self.slow_over:
            self.slow_started.set()
            self.release.wait(120)  # (a safety net: the test sets it)
        return self._tok.encode(text, **kw)


@pytest.fixture(scope="module")
def engine(tiny_model):
    return ScriptedEngine(tiny_model, Policy())


@pytest.fixture
def gw(engine, tmp_path):
    """A gateway with a pool, a spy tokenizer, a 0.5 s body deadline and a route that always fails."""
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    engine.policy = Policy()
    spy = SpyTokenizer(engine.tokenizer, slow_over=200_000)
    state = GatewayState(engine, spy, tool_formats(), pool=pool, admin_key="admin-secret")
    app = create_app(state, body_timeout_s=0.5)

    @app.post("/v1/boom")
    async def boom(request: Request):
        if request.query_params.get("read") != "no":
            await request.body()
        raise RuntimeError("a bug in the gateway")

    served = LiveGateway(state, app=app)
    served.pool, served.spy, served.policy = pool, spy, engine.policy
    yield served
    served.stop()
    pool.close()


def post(gw, path, body: bytes | dict, key=None, **kw):
    key = key or ("admin-secret" if path.startswith("/admin") else "k")
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "content-type": "application/json"}
    return httpx.post(f"{gw.url}{path}", content=content, headers=headers, timeout=kw.pop("timeout", 60), **kw)


def assert_shape(path, r, status):
    assert r.status_code == status, r.text[:300]
    data = r.json()
    if "/v1/messages" in path:
        assert data["type"] == "error" and isinstance(data["error"]["message"], str)
    else:
        assert isinstance(data["error"]["message"], str) and "type" in data["error"]
    return data["error"]["message"]


def recorded_count(gw) -> int:
    return sum(len(gw.pool.trajectory(s.trajectory_id).completions) for s in gw.state.sessions.values() if s.trajectory_id)


# ---- JSON that parses but cannot be answered ----------------------------------------------------------------


@pytest.mark.parametrize("path", GENERATION + ADMIN_POSTS)
def test_deep_nesting_is_a_400_everywhere(gw, path):
    r = post(gw, path, b"[" * 100_000 + b"]" * 100_000)
    assert "nested more than" in assert_shape(path, r, 400)
    deep = {"messages": MSG, "max_tokens": 4, "x": json.loads("[" * 70 + "]" * 70)}
    assert "nested more than" in assert_shape(path, post(gw, path, deep), 400)


@pytest.mark.parametrize("path", GENERATION)
def test_a_lone_surrogate_in_content_is_a_400(gw, path):
    body = {"/v1/responses": {"input": "\ud800"}, "/v1/completions": {"prompt": "\ud800"}}.get(
        path, {"messages": [{"role": "user", "content": "\ud800"}], "max_tokens": 4})
    raw = json.dumps(body).encode()  # ensure_ascii: the body holds the escape \ud800, as a client sends it
    assert b"\\ud800" in raw
    message = assert_shape(path, post(gw, path, raw), 400)
    assert "lone surrogate" in message
    assert recorded_count(gw) == 0


def test_a_lone_surrogate_in_model_is_refused_before_anything_is_recorded(gw):
    r = post(gw, "/v1/chat/completions", {"model": "\udfff", "messages": MSG, "max_tokens": 4}, key="k-model")
    assert "model: the text holds a lone surrogate" in assert_shape("/v1/chat/completions", r, 400)
    assert "k-model" not in gw.state.by_key and recorded_count(gw) == 0
    ok = post(gw, "/v1/chat/completions", {"model": "m\u00e9", "messages": MSG, "max_tokens": 4}, key="k-model")
    assert ok.status_code == 200 and ok.json()["model"] == "m\u00e9" and recorded_count(gw) == 1


def test_surrogates_and_non_finite_numbers_in_admin_bodies(gw):
    r = post(gw, "/admin/sessions", {"task_id": "\ud83d"})
    assert "task_id" in assert_shape("/admin/sessions", r, 400)
    r = post(gw, "/admin/sessions", b'{"task_id": "t", "x": NaN}')
    assert "not valid JSON" in assert_shape("/admin/sessions", r, 400)
    # a finite-looking literal that overflows to infinity, echoed back by /v1/responses (its tools)
    r = post(gw, "/v1/responses", b'{"input": "hi", "max_output_tokens": 4, "tools": [{"type": "web_search", "x": 1e999}]}')
    assert "must be finite" in assert_shape("/v1/responses", r, 400)
    assert recorded_count(gw) == 0


_text = st.text(alphabet=st.characters(min_codepoint=0xD780, max_codepoint=0xE020, exclude_categories=()), max_size=4)
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | _text,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=20)


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _bad(value) -> bool:
    def bad_text(s):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in s)

    if isinstance(value, str):
        return bad_text(value)
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(bad_text(k) or _bad(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_bad(v) for v in value)
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_json, limit=st.integers(1, 4))
def test_check_json_refuses_exactly_what_cannot_be_answered(value, limit):
    """check_json raises iff the value nests deeper than the limit, or holds a lone surrogate
    (in a key or a string) or a non-finite number — the plain recursive computation."""
    old = body_mod.MAX_JSON_DEPTH
    body_mod.MAX_JSON_DEPTH = limit
    try:
        try:
            body_mod.check_json(value)
            raised = False
        except APIError as exc:
            assert exc.status == 400
            raised = True
    finally:
        body_mod.MAX_JSON_DEPTH = old
    assert raised == (_depth(value) > limit or _bad(value))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=400) | st.lists(st.sampled_from(["<|im_start|>", " ", "    ", "\n", "ab", "é", "😀", "#" * 90, "x"]),
                                             max_size=60).map("".join))
def test_token_floor_never_exceeds_the_real_count(engine, text):
    tok = engine.tokenizer
    assert token_floor(tok, text) <= len(tok.encode(text, add_special_tokens=False))


# ---- big prompts ---------------------------------------------------------------------------------------------


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/completions"])
def test_a_10mb_prompt_is_refused_without_tokenising_it(gw, path):
    text = "lorem ipsum dolor " * (10 * 2**20 // 18)
    body = {"prompt": text, "max_tokens": 4} if path == "/v1/completions" else {"messages": [{"role": "user", "content": text}],
                                                                               "max_tokens": 4}
    before = _rss_mb()
    r = post(gw, path, body)
    message = assert_shape(path, r, 400)
    assert gw.spy.longest < 2**20, "the prompt was tokenised"
    assert _rss_mb() - before < 500  # tokenising it kept ~2 GB
    assert "this model's context is 65536 tokens" in message and "at least" in message


def test_health_answers_while_a_long_prompt_is_tokenised(gw):
    text = "word " * 80_000  # 400 kB: under the bound, so it is tokenised (slowly, by the spy), and over 65,536 tokens
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("r", post(gw, "/v1/chat/completions",
                                                                      {"messages": [{"role": "user", "content": text}]})))
    worker.start()
    try:
        assert gw.spy.slow_started.wait(120)
        health = httpx.get(f"{gw.url}/health", timeout=60)
        assert health.status_code == 200 and "r" not in result  # answered while the tokeniser is still held
    finally:
        gw.spy.release.set()
    worker.join(60)
    assert "this model's context is 65536 tokens" in assert_shape("/v1/chat/completions", result["r"], 400)


# ---- connections -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "kind"), [("/v1/chat/completions", None), ("/v1/messages", "timeout_error")])
def test_a_half_sent_body_times_out_with_a_408(gw, path, kind):
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nx-api-key: k\r\n"
                     "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"messages\": [".encode())
        started = time.monotonic()
        data = b""
        while chunk := sock.recv(65536):  # the server answers, then closes the connection
            data += chunk
        elapsed = time.monotonic() - started
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower()
    error = json.loads(payload)["error"]
    assert "did not arrive within 0.5 s" in error["message"] and elapsed > 0.4  # not before (a slower machine only adds)
    if kind:
        assert error["type"] == kind


def test_a_500_keeps_the_keep_alive_connection_usable(gw):
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    conn.request("POST", "/v1/boom", body=b"{}", headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    body = json.loads(r.read())
    assert r.status == 500 and body["error"]["type"] == "server_error" and "a bug in the gateway" in body["error"]["message"]
    assert (r.getheader("connection") or "").lower() != "close"
    sock = conn.sock
    conn.request("GET", "/health")
    again = conn.getresponse()
    assert again.status == 200 and json.loads(again.read())["status"] == "ok"
    assert conn.sock is sock  # the same connection, not a new one
    # a failure before the body was read: the server will not read it, and says it closes
    conn.request("POST", "/v1/boom?read=no", body=b"{}", headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 500 and r.getheader("connection") == "close" and json.loads(r.read())["error"]["type"] == "server_error"
    conn.close()
    assert gw.state.metrics.registry.get_sample_value("forge_gateway_requests_total", {"endpoint": "/v1/boom", "status": "500"}) == 2


def test_head_is_answered_like_get(gw):
    for path in ("/", "/health", "/v1/models", "/metrics"):
        get, head = httpx.get(f"{gw.url}{path}"), httpx.head(f"{gw.url}{path}")
        assert get.status_code == head.status_code == 200, path
        assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]
    assert httpx.get(f"{gw.url}/").json()["health"] == "/health"
    missing = httpx.head(f"{gw.url}/nowhere")
    assert missing.status_code == 404
    wrong = httpx.get(f"{gw.url}/v1/chat/completions")
    assert wrong.status_code == 405 and "GET is not allowed" in wrong.json()["error"]["message"]


def test_latency_of_a_streamed_call_counts_its_whole_stream(gw):
    registry = gw.state.metrics.registry
    labels = {"endpoint": "/v1/chat/completions"}
    before = registry.get_sample_value("forge_gateway_request_seconds_sum", labels) or 0.0
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", headers={"Authorization": "Bearer k-slow"},
                      json={"messages": [{"role": "user", "content": "slow"}], "stream": True}) as resp:
        lines = [line for line in resp.iter_lines() if line]
    assert resp.status_code == 200 and lines[-1] == "data: [DONE]"
    spent = registry.get_sample_value("forge_gateway_request_seconds_sum", labels) - before
    assert spent >= 0.6, spent  # the policy sleeps 0.6 s after the handler returned the stream
    assert registry.get_sample_value("forge_gateway_requests_total", {**labels, "status": "200"}) == 1


def _send_then_read(gw, path: str, body: bytes, *, chunked: bool = False) -> tuple[bytes, bytes]:
    """Send a whole request on a raw socket (no reading until every byte is sent), then read the answer:
    (status line and headers, body — what arrived of it before the connection ended)."""
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-secret\r\nx-api-key: k\r\n"
            "Content-Type: application/json\r\n")
    if chunked:
        pieces = [body[i:i + 2**20] for i in range(0, len(body), 2**20)]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        head += "Transfer-Encoding: chunked\r\n\r\n"
    else:
        payload = body
        head += f"Content-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", gw.port), timeout=60) as sock:
        sock.sendall(head.encode() + payload)  # a reset here: the gateway closed with the body unread
        data = b""
        while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
            data += chunk
        top, _, rest = data.partition(b"\r\n\r\n")
        lengths = [line.split(b":")[1] for line in top.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        while len(rest) < int(lengths[0]) and (chunk := sock.recv(65536)):
            rest += chunk
    return top, rest


@pytest.mark.parametrize("path", [*GENERATION, "/admin/sessions"])
def test_an_over_limit_body_is_read_and_its_413_arrives_whole(gw, path):
    """The gateway refuses by Content-Length at once, but reads (and drops) the rest of the body before it
    answers and closes: a client still sending is never reset, and its 413 arrives to the last byte."""
    body = b'{"messages": "' + b"x" * (17 * 2**20) + b'"}'
    for chunked in (False, True):
        top, rest = _send_then_read(gw, path, body, chunked=chunked)
        assert top.startswith(b"HTTP/1.1 413"), top[:200]
        length = int(next(line.split(b":")[1] for line in top.split(b"\r\n") if line.lower().startswith(b"content-length")))
        assert len(rest) == length and json.loads(rest)  # whole, and the provider's error shape
