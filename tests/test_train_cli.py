"""``forge train`` before anything starts: bad input is one red line (nothing created, no engine
started), and the embedded default's policy and budget are chosen as documented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_cli.config import load_config


@pytest.mark.parametrize(("args", "message"), [
    (["--task", "nope"], "no task suite named 'nope'"),
    (["--scaffold", "tool-cal"], "no scaffold named 'tool-cal' (did you mean tool-call"),
    (["--minutes", "0"], "--minutes must be > 0"),
    (["--steps", "0"], "--steps must be at least 1"),
    (["--model", "."], "no model at"),
    (["--resume", "nope"], "no run 'nope'"),
    (["--resume", "x", "--run", "y"], "--resume continues a run with its own config"),
    (["--mix", "calc=1,qa=1"], "no demo policy writes warm-start traces for qa"),
    (["--run", "../escape"], "run name"),
    (["--run", "taken"], "run taken exists"),
    (["--warmstart", "sometimes"], "train.warmstart.when"),
])
def test_bad_input_is_one_red_line_and_nothing_starts(cli, tmp_path, args, message):
    if "taken" in args:
        (tmp_path / "taken" / "runs").mkdir(parents=True)
        (tmp_path / "runs" / "taken").mkdir(parents=True)
        (tmp_path / "runs" / "taken" / "config.json").write_text("{}")
    result = cli("--set", f"run.dir={tmp_path / 'runs'}", "train", "--no-live", *args)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and message in lines[0], result.output
    if "taken" in args:
        assert (tmp_path / "runs" / "taken" / "config.json").read_text() == "{}"  # left as it was
    else:
        assert not (tmp_path / "runs").exists()  # no run folder, no engine, no model built
    assert not (Path.cwd() / "forge-home" / "models").exists()


def test_a_pool_that_does_not_answer_fails_before_anything_starts(cli, tmp_path):
    result = cli("--set", f"run.dir={tmp_path / 'runs'}", "--set", "pool.url=postgresql://forge@127.0.0.1:1/forge",
                 "train", "--no-live")
    assert result.exit_code == 1
    assert "the PostgreSQL pool at postgresql://forge@127.0.0.1:1/forge does not answer" in result.output
    assert not (tmp_path / "runs").exists()


def test_resume_needs_something_to_resume(cli, tmp_path):
    (tmp_path / "runs" / "empty").mkdir(parents=True)
    result = cli("--set", f"run.dir={tmp_path / 'runs'}", "train", "--resume", "empty")
    assert result.exit_code == 1 and "run empty has nothing to resume" in result.output


def test_a_copy_of_the_embedded_default_given_as_model_gets_its_scaffold_options(tmp_path):
    """--model with a checkpoint or warm copy of the embedded default (its marker file) samples the
    prompts it learned on; any other model keeps the scaffolds' own defaults; a setting of the user's wins."""
    from forge_cli.train.run import plan

    derived, other = tmp_path / "checkpoint", tmp_path / "mine"
    for folder in (derived, other):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    (derived / "forge_model.json").write_text("{}")
    unlisted = {"max_tokens": 48, "max_turns": 5, "system_prompt": ""}
    assert plan(load_config(env={}, overrides={"model.path": str(derived)})).config.scaffolds["tool-call-unlisted"] == unlisted
    assert "tool-call-unlisted" not in plan(load_config(env={}, overrides={"model.path": str(other)})).config.scaffolds
    mine = plan(load_config(env={}, overrides={"model.path": str(derived), "scaffolds.tool-call-unlisted.max_turns": 7}))
    assert mine.config.scaffolds["tool-call-unlisted"] == {**unlisted, "max_turns": 7}


def test_the_embedded_default_is_created_warm_started_once_and_bounded(tmp_path):
    from forge_cli.train.run import DEFAULT_MINUTES, plan, warm_model_dir

    config = load_config(env={})
    first = plan(config)
    assert first.warmstart and first.save_warm_to == warm_model_dir() and first.minutes == DEFAULT_MINUTES
    assert (Path(first.config.model.path) / "config.json").is_file()  # forge model init, on first use
    assert config.model.path is None  # the caller's config is not changed
    assert first.config.scaffolds["tool-call"] == {"max_tokens": 48, "max_turns": 5}  # the embedded default's
    mine = plan(load_config(env={}, overrides={"scaffolds.tool-call.max_turns": 7}))
    assert mine.config.scaffolds["tool-call"] == {"max_tokens": 48, "max_turns": 7}  # a setting of the user's wins
    warm_model_dir().mkdir(parents=True)
    (warm_model_dir() / "config.json").write_text(json.dumps({}))
    assert plan(config).warmstart  # a copy that does not say what it was warm-started on is not reused
    record = {"suite": config.rollout.task, "mix": {}, "scaffold": config.rollout.scaffold}
    (warm_model_dir() / "warmstart.json").write_text(json.dumps(record))
    other = plan(load_config(env={}, overrides={"rollout.task": "kv-search"}))
    assert other.warmstart  # warm-started on another suite: warm-start anew
    sloppy = plan(load_config(env={}, overrides={"train.warmstart.teacher_slips": 0.3}))
    assert sloppy.warmstart  # from another teacher: warm-start anew (a record without slips had none)
    later = plan(config, minutes=3)
    assert (str(later.config.model.path), later.warmstart, later.minutes) == (str(warm_model_dir()), False, 3)
    unlisted = {"rollout.scaffold": "tool-call-unlisted"}  # its embedded options: the prompts the copy must have learned
    (warm_model_dir() / "warmstart.json").write_text(json.dumps({**record, "scaffold": "tool-call-unlisted"}))
    assert plan(load_config(env={}, overrides=unlisted)).warmstart  # a record without them: made with other prompts
    (warm_model_dir() / "warmstart.json").write_text(json.dumps(
        {**record, "scaffold": "tool-call-unlisted", "scaffold_options": {"max_tokens": 48, "max_turns": 5, "system_prompt": ""}}))
    assert not plan(load_config(env={}, overrides=unlisted)).warmstart
    never = plan(load_config(env={}, overrides={"train.warmstart.when": "never"}))
    assert not never.warmstart and str(never.config.model.path) != str(warm_model_dir())
    always = plan(load_config(env={}, overrides={"train.warmstart.when": "always"}))
    assert always.warmstart and always.save_warm_to is None  # a fresh warm start, the kept copy left alone


def test_a_warm_copy_made_here_comes_before_the_shipped_one_and_either_starts_at_once(tmp_path, monkeypatch):
    """With no kept copy, a run starts from the shipped warm policy when it was warm-started on what the
    run trains (no model init, no warm start); a matching copy made here (forge model warmstart) comes
    first; a run that trains something else, or asks for a warm start, makes its own."""
    from forge_cli.train import run as run_module
    from forge_cli.train.run import plan, warm_model_dir
    from forge_cli.train.warmstart import warm_key

    shipped = tmp_path / "shipped"
    monkeypatch.setattr(run_module, "shipped_warm_dir", lambda: shipped)
    config = load_config(env={})
    embedded = plan(config).config  # with the embedded default's scaffold options, as the record keeps them
    shipped.mkdir()
    (shipped / "config.json").write_text("{}")
    (shipped / "warmstart.json").write_text(json.dumps(warm_key(embedded)))
    start = plan(config)
    assert (str(start.config.model.path), start.warmstart, start.save_warm_to) == (str(shipped), False, None)
    slower = plan(load_config(env={}, overrides={"train.warmstart.teacher_rechecks": 0.2}))
    assert slower.warmstart and str(slower.config.model.path) != str(shipped)  # another teacher: not the shipped one's
    assert plan(load_config(env={}, overrides={"train.warmstart.when": "always"})).warmstart
    warm_model_dir().mkdir(parents=True)
    (warm_model_dir() / "config.json").write_text("{}")
    (warm_model_dir() / "warmstart.json").write_text(json.dumps(warm_key(embedded)))
    assert str(plan(config).config.model.path) == str(warm_model_dir())


def test_a_users_model_has_no_time_bound_unless_asked(tiny_model):
    from forge_cli.train.run import plan

    config = load_config(env={}, overrides={"model.path": str(tiny_model)})
    assert (plan(config).minutes, plan(config).warmstart) == (None, False)
    assert plan(config, minutes=2.5).minutes == 2.5
    assert plan(load_config(env={}, overrides={"model.path": str(tiny_model), "train.minutes": 9})).minutes == 9


def test_every_option_is_documented(cli):
    result = cli("train", "--help")
    assert result.exit_code == 0
    for option in ("--minutes", "--steps", "--run", "--resume", "--model", "--scaffold", "--task", "--mix", "--warmstart",
                   "--live"):
        assert option in result.output
    cli_doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()  # the command reference
    assert "forge train [--minutes M]" in cli_doc and "forge model warmstart" in cli_doc
    row = next(line for line in cli_doc.splitlines() if line.startswith("| `forge train [--minutes M]"))
    for option in ("--minutes", "--steps", "--run", "--resume", "--model", "--scaffold", "--task", "--mix", "--warmstart",
                   "--live", "--no-live"):
        assert option in row, f"docs/cli.md's forge train row does not document {option}"
