"""``forge model init`` and ``forge gateway serve`` as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.waiting import wait_until


def test_model_init_and_show(cli, tmp_path):
    target = tmp_path / "m"
    made = cli("model", "init", "--path", str(target))
    assert made.exit_code == 0, made.stderr
    assert (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file()
    again = cli("model", "init", "--path", str(target))
    assert "already exists" in again.stdout
    shown = cli("model", "show", "--path", str(target))
    assert "LlamaForCausalLM" in shown.stdout and "chat template: yes" in shown.stdout
    missing = cli("model", "show", "--path", str(tmp_path / "nope"))
    assert missing.exit_code == 1 and "no model at" in missing.stderr


def test_serve_without_a_model_is_one_red_line(cli):
    result = cli("gateway", "serve", "--engine", "hf")
    assert result.exit_code == 1 and "run `forge model init`" in result.stderr


@pytest.mark.slow
def test_gateway_serve_records_into_a_run(tiny_model, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"rules": [{"when": "ping", "reply": "pong"}], "turns": ["hello"]}))
    forge = str(Path(sys.executable).with_name("forge"))
    proc = subprocess.Popen([forge, "gateway", "serve", "--model", str(tiny_model), "--engine", "scripted", "--policy", str(policy),
                             "--port", str(port), "--run", "served"], cwd=tmp_path, env={**os.environ, "COLUMNS": "200"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"forge gateway serve exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, what="the gateway to answer /health")
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", headers={"Authorization": "Bearer me"},
                       json={"messages": [{"role": "user", "content": "ping"}]}, timeout=60)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "pong"
        # the same gateway, at the same time, on the run's unix socket (how sandboxed agents reach it)
        sock = tmp_path / "runs" / "served" / "gateway.sock"
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://127.0.0.1") as over_socket:
            r = over_socket.post("/v1/chat/completions", headers={"Authorization": "Bearer sandboxed"},
                                 json={"messages": [{"role": "user", "content": "ping"}]}, timeout=60)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "pong"
    finally:
        proc.send_signal(signal.SIGTERM)  # as a process manager stops it: clean-up must still run
        out, err = proc.communicate(timeout=60)
    assert "admin key: forge-admin-" in out and f"unix socket: {sock}" in out
    assert not sock.exists()  # removed on exit
    run = tmp_path / "runs" / "served"
    assert json.loads((run / "config.json").read_text())["model"]["engine"]["type"] == "scripted"
    stats = subprocess.run([forge, "pool", "stats", str(run), "--json"], capture_output=True, text=True, cwd=tmp_path)
    assert json.loads(stats.stdout)["completions"] == 2


def test_a_failed_start_leaves_no_run_behind(cli, tiny_model, tmp_path):
    for args in (["--tool-format", "nope"], ["--engine", "scripted", "--policy", "nomod:fn"]):
        result = cli("gateway", "serve", "--model", str(tiny_model), "--port", "0", "--run", "failed", *args)
        assert result.exit_code == 1 and result.stderr.startswith("Error: ")
        assert not (tmp_path / "runs" / "failed").exists()
