"""forge.toml: defaults < file < FORGE_* environment < flags, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_cli.config import ForgeConfig, load_config, parse_set_flags, write_resolved
from forge_cli.errors import ForgeError


def test_defaults_need_no_file():
    config = load_config(env={})
    assert config == ForgeConfig()
    assert config.pool.scheduler.window_fraction == 0.3
    assert config.pool.scheduler.type == "windowed_fifo"
    assert config.train.loss.type == "cispo"


def test_precedence(tmp_path):
    (tmp_path / "forge.toml").write_text("[pool]\nmax_active_groups = 8\n[pool.scheduler]\nwindow_fraction = 0.5\n[train]\nlr = 1e-4\n")
    from_file = load_config(env={})
    assert (from_file.pool.scheduler.window_fraction, from_file.pool.max_active_groups) == (0.5, 8)
    env = {"FORGE_POOL__SCHEDULER__WINDOW_FRACTION": "0.6", "FORGE_TRAIN__LOSS__EPS_HIGH": "0.2", "FORGE_HOME": "/x"}
    from_env = load_config(env=env)
    assert from_env.pool.scheduler.window_fraction == 0.6
    assert from_env.pool.max_active_groups == 8  # the file's value survives a partial override
    assert from_env.train.loss.eps_high == 0.2
    from_flag = load_config(env=env, overrides={"pool.scheduler.window_fraction": 0.7})
    assert from_flag.pool.scheduler.window_fraction == 0.7
    assert from_flag.train.lr == 1e-4


def test_explicit_config_path(tmp_path):
    other = tmp_path / "elsewhere.toml"
    other.write_text('[model]\nengine = "hf"\n')
    assert load_config(other, env={}).model.engine.type == "hf"
    with pytest.raises(ForgeError, match="does not exist"):
        load_config(tmp_path / "missing.toml", env={})


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[pool.scheduler]\nwindow_fraction = 1.5\n", "pool.scheduler.window_fraction: Input should be less than or equal to 1"),
        ("[pool]\nwindow_fractio = 0.5\n", "pool.window_fractio: unknown key"),
        ("[pool.scheduler]\nwindow_fraction = 'abc'\n", "pool.scheduler.window_fraction: Input should be a valid number"),
        ("[pool]\nwindow_fraction = 0.5\n", "pool.window_fraction: unknown key"),
        ("[train]\nengine = 'jax'\n", "train.engine: type must be one of 'torch', 'deepspeed' (got 'jax')"),
        ("[gateway]\nsocket = 'none'\n", "gateway.socket: Value error, 'none' is neither \"auto\", \"\" (no socket) nor a path"),
        ("[nonsense]\nx = 1\n", "nonsense: unknown key"),
        ("[pool\n", "not valid TOML"),
    ],
)
def test_file_errors_name_key_and_file(tmp_path, toml, message):
    path = tmp_path / "forge.toml"
    path.write_text(toml)
    with pytest.raises(ForgeError) as info:
        load_config(env={})
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_env_and_flag_errors_name_their_source():
    with pytest.raises(ForgeError, match=r"^environment variable FORGE_POOL__SCHEDULER__WINDOW_FRACTION: pool.scheduler.window_fraction"):
        load_config(env={"FORGE_POOL__SCHEDULER__WINDOW_FRACTION": "7"})
    with pytest.raises(ForgeError, match=r"^command-line flag --set pool.bogus: pool.bogus: unknown key"):
        load_config(env={}, overrides={"pool.bogus": 1})
    with pytest.raises(ForgeError, match="expects KEY=VALUE"):
        parse_set_flags(["pool.window_fraction"])
    # an unknown section is named by the flag or variable that brought it, not "defaults"
    with pytest.raises(ForgeError, match=r"^command-line flag --set nope.x: nope: unknown key"):
        load_config(env={}, overrides={"nope.x": 1})
    with pytest.raises(ForgeError, match=r"^environment variable FORGE_NOPE__X: nope: unknown key"):
        load_config(env={"FORGE_NOPE__X": "1"})
    with pytest.raises(ForgeError, match=r"^command-line flag --engine: model.engine"):
        load_config(env={}, overrides={"model.engine.type": "foo"}, flag_names={"model.engine.type": "--engine"})


def test_set_values_use_toml_syntax():
    assert parse_set_flags(["a.b=0.5", "a.c=true", "a.d=hello", "a.e=[1, 2]"]) == {
        "a.b": 0.5,
        "a.c": True,
        "a.d": "hello",
        "a.e": [1, 2],
    }


def test_resolved_config_written_as_json(tmp_path):
    config = load_config(env={}, overrides={"pool.scheduler.window_fraction": 0.25, "scaffolds.react.max_turns": 3})
    out = write_resolved(config, tmp_path / "runs" / "r1")
    data = json.loads(out.read_text())
    assert data["pool"]["scheduler"]["window_fraction"] == 0.25
    assert data["scaffolds"] == {"react": {"max_turns": 3}}
    assert ForgeConfig.model_validate(data) == config


EXAMPLE = Path(__file__).resolve().parent.parent / "forge.toml"


def _example_lines():
    """(section, key, value) of every commented-out ``# key = value`` line of the example file."""
    import re
    import tomllib

    section, found = None, []
    for line in EXAMPLE.read_text().splitlines():
        if header := re.match(r"^\[(.+)\]\s*$", line):
            section = header.group(1)
        elif (assignment := re.match(r"^# (\w+) = (.+?)(?:\s+#.*)?$", line)) and section:
            found.append((section, assignment.group(1), tomllib.loads(f"v = {assignment.group(2)}")["v"]))
    return found


# what the example sets beyond the defaults: the embedded default's learning settings (issue 11), each
# with its reason in the file
LEARNING_SETTINGS = {
    "rollout.scaffold": "tool-call-unlisted", "rollout.task": "calc-1", "rollout.concurrency": 16, "pool.max_active_groups": 8,
    "train.lr": 1e-4, "train.groups_per_step": 4, "train.group_size": 8, "train.eval_every": 10, "train.eval_tasks": 32,
    "train.eval_samples": 4, "train.checkpoint_every": 20, "train.warmstart.target_success": 0.25,
    "train.warmstart.max_minutes": 8, "train.warmstart.batch_size": 32, "train.warmstart.lr": 3e-3,
    "train.warmstart.final_lr_fraction": 0.33, "train.warmstart.decay_steps": 800, "train.warmstart.eval_every": 100,
    "train.warmstart.teacher_slips": 0.5, "train.warmstart.teacher_rechecks": 0.6,
}


def test_example_forge_toml_is_the_defaults():
    """As shipped the example sets the defaults but for the embedded default's learning settings (it
    says which, and why), and names three plugin sections."""
    config = load_config(EXAMPLE, env={})
    assert config.scaffolds == {"tool-call-unlisted": {}, "truncate-bc": {}, "opencode": {}}
    assert config.model_copy(update={"scaffolds": {}}) == load_config(None, env={}, overrides=LEARNING_SETTINGS)


@pytest.mark.parametrize(("section", "key", "value"), [t for t in _example_lines() if not t[0].startswith("scaffolds.")])
def test_example_forge_toml_documents_real_keys(tmp_path, section, key, value):
    """Each commented-out line, uncommented on its own, is accepted and its value arrives."""
    path = tmp_path / "one.toml"
    path.write_text(f"[{section}]\n{key} = {json.dumps(value)}\n")
    loaded = load_config(path, env={}).model_dump(mode="json")
    for part in section.split("."):
        loaded = loaded[part]
    got = loaded[key]
    assert got == value or (isinstance(got, dict) and got.get("type") == value)  # a table chosen by its type


def test_example_forge_toml_scaffold_defaults_are_the_real_ones():
    from forge_cli import plugins

    lines = [t for t in _example_lines() if t[0].startswith("scaffolds.")]
    assert lines
    registry = plugins.get_registry()
    for section, key, value in lines:
        name = section.split(".", 1)[1]
        assert getattr(registry.options_for("scaffolds", name, {}, "forge.toml"), key) == value, (section, key)


# ---- through the CLI ---------------------------------------------------------------------------


def test_cli_bad_config_is_one_line_exit_1(cli, tmp_path):
    (tmp_path / "forge.toml").write_text("[gateway]\nport = 99999\n")
    result = cli("config", "show")
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"Error: {tmp_path / 'forge.toml'}: gateway.port: Input should be less than or equal to 65535 (got 99999)"]
    assert result.stdout == ""


def test_cli_precedence(cli, tmp_path):
    (tmp_path / "forge.toml").write_text("[gateway]\nport = 9000\nhost = '127.0.0.2'\n")
    result = cli("--set", "gateway.port=9100", "config", "show", env={"FORGE_GATEWAY__HOST": "127.0.0.3"})
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["gateway"]["port"] == 9100 and data["gateway"]["host"] == "127.0.0.3"


def test_cli_plugin_section_validated(cli, tmp_path):
    (tmp_path / "forge.toml").write_text("[scaffolds.truncate-bc]\ncontext_budget_tokens = 2048\n")
    shown = cli("scaffold", "show", "truncate-bc")
    assert shown.exit_code == 0 and "2048" in shown.stdout
    (tmp_path / "forge.toml").write_text("[scaffolds.truncate-bc]\ncontext_budget = 2048\n")
    bad = cli("scaffold", "show", "truncate-bc")
    assert bad.exit_code == 1
    assert "[scaffolds.truncate-bc]: context_budget: unknown key" in bad.stderr
    (tmp_path / "forge.toml").write_text("[scaffolds.no-such]\nx = 1\n")
    unknown = cli("config", "show")
    assert unknown.exit_code == 1
    assert "no scaffold named 'no-such' is registered" in unknown.stderr
