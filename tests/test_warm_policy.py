"""The warm policy Forge ships (``forge_cli/engine/warm_policy``): what ``forge train`` on the
repository's forge.toml starts from at once, made by a recipe that repeats (scripts/make_warm_policy.sh).

The recipe test replays it on a short budget: the record's settings, the embedded default made
afresh, the same first supervised steps. The first steps take the first traces in the task
stream's order (each step learns what no step has learned yet first), so a replay that writes
fewer traces learns the same first batches — and must find the recorded losses."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from forge_cli.config import load_config
from forge_cli.engine.default_model import MARKER, is_embedded_default, shipped_warm_dir

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = shipped_warm_dir()


def record() -> dict:
    return json.loads((SHIPPED / "warmstart.json").read_text())


def repository_config(**overrides):
    return load_config(ROOT / "forge.toml", env={}, overrides=overrides)


def test_the_shipped_policy_is_a_small_servable_copy_of_the_embedded_default_that_says_how_it_was_made():
    files = {p.name for p in SHIPPED.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", MARKER, "warmstart.json"} <= files
    assert is_embedded_default(SHIPPED)
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) < 12 * 2**20  # a few MB in the package
    made = record()
    assert made["reason"] == "step budget" and made["steps"] == made["recipe"]["train.warmstart.max_steps"]
    assert 0.0 < made["heldout_success"] < 0.5  # solves some, clearly not most, sampled at the training temperature
    assert len(made["first_losses"]) >= 3 and made["recipe"]["model.init"]["size"] == "tiny"


def test_forge_train_on_the_repositorys_config_starts_from_it_at_once():
    from forge_cli.train.run import plan
    from forge_cli.train.warmstart import recorded_key, warm_key

    start = plan(repository_config())
    assert Path(start.config.model.path) == SHIPPED and not start.warmstart  # no model init, no warm start
    assert warm_key(start.config) == recorded_key(record(), start.config)  # its suite, prompts, teacher
    # a run over a mix of scaffolds was not what it was warm-started on (its record, older than the key, says none)
    mixed = repository_config(**{"rollout.scaffold_mix": {"react": 1.0, "tool-call-unlisted": 1.0}})
    assert recorded_key(record(), mixed)["scaffold_mix"] == {} != warm_key(mixed)["scaffold_mix"]
    assert plan(repository_config(**{"train.warmstart.when": "always"})).warmstart  # still made from nothing on request
    assert Path(plan(repository_config(**{"train.warmstart.teacher_slips": 0.1})).config.model.path) != SHIPPED
    # the warm-up cap alone changes no trace (no warm-ups to cap): still the shipped policy; with warm-ups it
    # is another teacher, and a record older than the key was made with the cap of two
    assert Path(plan(repository_config(**{"train.warmstart.teacher_max_warmups": 3})).config.model.path) == SHIPPED
    warmups = {"train.warmstart.teacher_warmups": 0.8}
    costly = repository_config(**warmups, **{"train.warmstart.teacher_max_warmups": 3})
    assert warm_key(costly) != warm_key(repository_config(**warmups))
    older = {**record(), "teacher_warmups": 0.8}  # a record with warm-ups from before the cap was a setting
    cap = lambda config: (recorded_key(older, config)["teacher_max_warmups"], warm_key(config)["teacher_max_warmups"])
    assert cap(repository_config(**warmups)) == (2, 2) and cap(costly) == (2, 3)


@pytest.mark.slow
def test_the_recipe_on_a_short_budget_is_the_one_that_made_the_shipped_file(tmp_path):
    """``forge model warmstart`` with the record's settings (three steps, fewer traces) takes the same
    first steps: the same losses, from a default model created afresh."""
    from forge_cli.train.run import warmstart_model

    made = record()
    recipe = {k: v for k, v in made["recipe"].items() if k != "model.init"}
    recipe.update({"train.warmstart.max_steps": 3, "train.warmstart.traces": 48, "run.dir": str(tmp_path / "runs"),
                   "gateway.port": 0})
    config = repository_config(**recipe)
    result, folder = asyncio.run(warmstart_model(config, out=tmp_path / "replay", run="replay"))
    assert result.steps == 3 and result.reason == "step budget"
    assert json.loads((folder / MARKER).read_text()) == made["recipe"]["model.init"]  # the same model, made afresh
    assert result.first_losses == pytest.approx(made["first_losses"][:3], rel=1e-4)
    replayed = json.loads((folder / "warmstart.json").read_text())
    assert {k: replayed[k] for k in ("suite", "scaffold", "scaffold_options", "teacher_slips", "teacher_rechecks")} == \
        {k: made[k] for k in ("suite", "scaffold", "scaffold_options", "teacher_slips", "teacher_rechecks")}
