"""The CLI through Typer's runner: commands, errors, and what start-up imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from forge_cli import __version__


def test_version(cli):
    result = cli("version")
    assert result.exit_code == 0
    assert f"forge {__version__}" in result.stdout


def test_help_lists_every_command(cli):
    result = cli("--help")
    assert result.exit_code == 0
    for command in ("version", "doctor", "plugins", "config", "scaffold"):
        assert command in result.stdout


def test_start_up_imports_nothing_heavy():
    code = (
        "import sys\n"
        "from forge_cli.cli import build_app\n"
        "from forge_cli import plugins\n"
        "build_app(); plugins.get_registry()\n"
        "heavy = [m for m in ('torch', 'vllm', 'deepspeed', 'ray', 'transformers', 'docker', 'fastapi') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_forge_help_process_exits_zero():
    done = subprocess.run([sys.executable, "-m", "forge_cli", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert "scaffold" in done.stdout


def test_scaffold_list_shows_builtins(cli):
    result = cli("scaffold", "list", "--json")
    assert result.exit_code == 0
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    white = {"react", "truncate-bc", "discard-tool-output", "summarize", "keep-last-k"}
    black = {"opencode", "mini-swe-agent", "aider", "codex", "claude-code", "openai-agents", "smolagents"}
    assert white | black <= set(rows)
    assert all(rows[n]["kind"] == "white" and rows[n]["installed"] == "built-in" for n in white)
    assert all(rows[n]["kind"] == "black" and rows[n]["installed"] == "no" for n in black)
    assert rows["truncate-bc"]["context_policy"] == "truncate"
    assert rows["opencode"]["plugin"] == "forge:scaffolds"
    # the API each speaks
    assert {rows[n]["api"] for n in white} == {"openai-chat"}
    assert (rows["codex"]["api"], rows["claude-code"]["api"], rows["gemini-cli"]["api"], rows["agno"]["api"]) == \
        ("openai-responses", "anthropic-messages", "gemini", "ollama")


def test_scaffold_list_table_and_filter(cli):
    result = cli("scaffold", "list", "--kind", "white")
    assert result.exit_code == 0
    assert "truncate-bc" in result.stdout and "opencode" not in result.stdout
    bad = cli("scaffold", "list", "--kind", "grey")
    assert bad.exit_code == 1
    assert "--kind must be 'white' or 'black'" in bad.stderr


def test_scaffold_list_fits_a_narrow_terminal_without_cutting_a_name(cli):
    """At 80 columns the table keeps name, kind and installed whole (every scaffold's name can be copied
    from it) and says which columns it left out; a wide terminal shows them all."""
    names = [row["name"] for row in json.loads(cli("scaffold", "list", "--json").stdout)]
    for width, hidden in ((80, ["API", "tool format", "context policy", "plugin"]), (250, [])):
        done = subprocess.run([sys.executable, "-m", "forge_cli", "scaffold", "list"], capture_output=True, text=True,
                              env={**os.environ, "COLUMNS": str(width)}, check=True)
        lines = done.stdout.splitlines()
        assert max(len(line.rstrip()) for line in lines) <= width
        header = next(line for line in lines if "name" in line and "kind" in line)
        assert [h for h in ("API", "tool format", "context policy", "plugin") if h not in header] == hidden
        cells = {line.split("│")[1].strip() for line in lines if line.startswith("│")}
        assert set(names) <= cells  # whole names, one a row: nothing cut with "…"
        text = " ".join(done.stdout.split())
        assert ("not shown at 80 columns" in text and "context policy, plugin" in text) if hidden else "not shown" not in text


def test_scaffold_doctor_on_an_agent_not_installed_says_how_and_exits_1(cli):
    done = cli("scaffold", "doctor", "aider", "--json")
    assert done.exit_code == 1
    checks = {c["check"]: c for c in json.loads(done.stdout)}
    assert list(checks) == ["registered", "installed", "starts", "sandbox", "one task"]
    assert checks["registered"]["ok"] and "speaks openai-chat" in checks["registered"]["detail"]
    assert checks["installed"] == {"check": "installed", "ok": False, "detail": "not installed: run `forge scaffold add aider`"}
    assert checks["starts"]["ok"] is None and checks["one task"]["ok"] is None
    assert checks["one task"]["detail"] == "installed failed"
    table = cli("scaffold", "doctor", "aider")
    assert table.exit_code == 1 and "failed installed: not installed" in " ".join(table.stdout.split())
    white = cli("scaffold", "doctor", "react", "--json")
    assert white.exit_code == 0 and [c["ok"] for c in json.loads(white.stdout)] == [True, None]
    assert cli("scaffold", "doctor", "nope").exit_code == 1
    assert "--sandbox: no sandbox named 'moon'" in cli("scaffold", "doctor", "aider", "--sandbox", "moon").stderr


def test_scaffold_show(cli):
    result = cli("scaffold", "show", "codex")
    assert result.exit_code == 0
    assert "@openai/codex@^0.171.0" in result.stdout
    assert "wire_api" in result.stdout


def test_unknown_scaffold_is_one_red_line(cli):
    result = cli("scaffold", "show", "nope")
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: no scaffold named 'nope'")
    assert "Traceback" not in result.stderr + result.stdout


def test_add_white_box_is_a_no_op(cli):
    result = cli("scaffold", "add", "truncate-bc")
    assert result.exit_code == 0
    assert "nothing to install" in result.stdout


def test_add_unknown_target_is_a_clear_error(cli):
    result = cli("scaffold", "add", "not a package!")
    assert result.exit_code == 1
    assert "is not a scaffold name, a path, or a package requirement" in result.stderr


def test_remove_builtin_white_box_refused(cli):
    result = cli("scaffold", "remove", "react")
    assert result.exit_code == 1
    assert "built into Forge" in result.stderr


def test_remove_not_installed_agent(cli):
    result = cli("scaffold", "remove", "aider")
    assert result.exit_code == 0
    assert "not installed" in result.stdout


def test_plugins_lists_builtins(cli):
    result = cli("plugins", "--json")
    assert result.exit_code == 0
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    assert "hermes" in plugins["forge:tool-formats"]["registered"]["tool_formats"]
    assert len(plugins["forge:tool-formats"]["registered"]["tool_formats"]) == 7  # Forge's text formats, native, harmony
    vllm = plugins["forge:vllm-parsers"]["registered"]
    assert len(vllm["tool_formats"]) == 53 and "hermes" not in vllm["tool_formats"]  # Forge's hermes stands for vLLM's
    assert len(vllm["reasoning_parsers"]) == 38 and "qwen3" in vllm["reasoning_parsers"]
    assert set(plugins["forge:sandboxes"]["registered"]["sandboxes"]) == {"local", "docker"}
    assert all(p["builtin"] for p in plugins.values())


def test_a_file_that_cannot_be_written_is_one_red_line(cli, tmp_path):
    (tmp_path / "taken").write_text("x")
    result = cli("model", "init", "--path", str(tmp_path / "taken"))
    assert result.exit_code == 1 and result.stderr.count("\n") == 1 and "taken: File exists" in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_model_init_checks_the_size_first(cli):
    result = cli("model", "init", "--size", "huge")
    assert result.exit_code == 1 and "unknown model size 'huge': choose one of tiny, small" in result.stderr


def test_version_flag(cli):
    from forge_cli import __version__

    result = cli("--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"forge {__version__}"
