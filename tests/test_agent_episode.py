"""A real agent program (smolagents, installed from PyPI by `forge scaffold add`) runs a whole
episode through the gateway, driven by a scripted policy, and completes its task."""

from __future__ import annotations

import os
import subprocess

import pytest

from forge_cli import plugins
from forge_cli.engine.scripted import FilePolicy, ScriptedEngine
from forge_cli.gateway.state import GatewayState
from forge_cli.installer import install_agent
from forge_cli.paths import data_dir
from forge_cli.pool import DataPool
from tests.conftest import LiveGateway, tool_formats

pytestmark = pytest.mark.slow


def test_smolagents_episode_through_the_gateway(tiny_model, tmp_path):
    spec = plugins.get_registry().scaffold("smolagents")
    agent = install_agent(spec)
    policy = FilePolicy({"turns": [
        '<tool_call>\n{"name": "shell", "arguments": {"command": "echo hi > hello.txt"}}\n</tool_call>',
        '<tool_call>\n{"name": "final_answer", "arguments": {"answer": "hello.txt now contains hi"}}\n</tool_call>',
    ]})
    engine = ScriptedEngine(tiny_model, policy)
    pool = DataPool.sqlite(tmp_path / "pool.sqlite")
    live = LiveGateway(GatewayState(engine, engine.tokenizer, tool_formats(), pool=pool, admin_key="admin"))
    try:
        import httpx

        session = httpx.post(f"{live.url}/admin/sessions", headers={"Authorization": "Bearer admin"},
                             json={"task_id": "hello", "scaffold": "smolagents"}).json()
        workdir = tmp_path / "work"
        workdir.mkdir()
        values = {"bin": str(agent.bin), "python": str(agent.bin), "scaffolds": str(data_dir("scaffolds")),
                  "workdir": str(workdir), "base_url": f"{live.url}/v1", "gateway_url": live.url,
                  "api_key": session["api_key"], "model": "forge", "prompt": "Create hello.txt containing hi."}
        command, env, files = spec.launch.render(values)
        for name, text in files.items():
            (workdir / name).write_text(text)
        done = subprocess.run(command, cwd=workdir, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert (workdir / "hello.txt").read_text() == "hi\n"
        assert "hello.txt now contains hi" in done.stdout
        completions = pool.trajectory(session["trajectory_id"]).completions
        assert len(completions) == 2
        tok = engine.tokenizer
        # smolagents' own tool schemas reached the prompt; the second call saw the tool's output
        assert '"name": "shell"' in tok.decode(completions[0].prompt_ids)
        assert "Observation:\n[exit code 0]" in tok.decode(completions[1].prompt_ids)
    finally:
        live.stop()
        pool.close()
