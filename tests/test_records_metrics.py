"""The metrics records (forge_cli.records.metrics): one table of what a metrics.jsonl line holds,
each field documented and checked on reading; a record reads back what it wrote; older lines read
(missing keys → None, unknown keys and kinds ignored); a bad value names its kind and field."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from forge_cli.errors import ForgeError
from forge_cli.records.metrics import (CHECKS, RECORDS, EvalMetrics, StepMetrics, WarmstartMetrics, Window, parse_line,
                                       read_state)


def test_every_field_is_documented_and_has_a_check():
    for record in RECORDS.values():
        for f in fields(record):
            assert f.metadata.get("doc"), (record.__name__, f.name)
            assert f.type in CHECKS, (record.__name__, f.name, f.type)
    assert {k: r.kind for k, r in RECORDS.items()} == {"step": "step", "eval": "eval", "warmstart": "warmstart"}


@pytest.mark.parametrize("record", [
    StepMetrics(step=3, time_s=1.5, policy_version=3, groups=2, trajectories=4, samples=8, group_ids=("g1", "g2"),
                window=Window(head=7, size=None), loss=0.25, mean_ratio=1.0, grad_norm=0.5, reward_mean=0.75,
                rewards={"outcome": 0.5}, success=0.5, success_by_suite={"calc": 0.5}, difficulty_mean=None,
                max_age=1, mean_age=0.5, ages={0: 4, 1: 4}, tokens=100, unique_tokens=40, output_tokens=30,
                take_s=0.25, wait_s=0.125, train_s=1.0, sync_s=0.5, step_s=2.0, trainer_idle=0.0625, engine_idle=0.5,
                samples_per_s=2.0, train_tokens_per_s=40.0, rollout_tokens_per_s=15.0),
    EvalMetrics(step=4, time_s=9.0, policy_version=4, split="heldout", success=0.25, success_by_suite={"calc": 0.25},
                reward_mean=None, tasks=2, samples_per_task=2, seconds=3.5),
    WarmstartMetrics(step=5, time_s=2.0, loss=1.5, lr=1e-3, tokens=64, unique_tokens=32, completions=16, learned=8),
    WarmstartMetrics(step=6, loss=1.5, heldout_success=0.5, policy_version=1),
])
def test_a_record_reads_back_what_it_wrote(record):
    line = json.loads(json.dumps(record.line()))
    assert line["kind"] == record.kind and list(line)[:3] == ["kind", "step", "time_s"]
    assert parse_line(line) == record


def test_an_optional_field_is_written_only_when_measured():
    assert "heldout_success" not in WarmstartMetrics(step=1, loss=1.0).line()
    assert WarmstartMetrics(step=1, heldout_success=0.0).line()["heldout_success"] == 0.0
    assert StepMetrics(step=1).line()["grad_norm"] is None  # a step writes all its fields, measured or not


def test_older_lines_read():
    old = parse_line({"step": 2, "loss": 1, "packed_tokens": 9, "window": {"head": 3}})  # no kind: a step
    assert isinstance(old, StepMetrics) and (old.step, old.loss, old.grad_norm, old.window) == (2, 1, None, Window(3, None))
    assert (old.rewards, old.ages, old.group_ids) == ({}, {}, ())
    assert parse_line({"kind": "future", "step": 1}) is None
    assert parse_line({"kind": "eval", "step": 2.0}).step == 2


@pytest.mark.parametrize(("line", "error"), [
    ({"kind": "step", "step": 1, "loss": "low"}, "step line: 'loss' must be a number, got 'low'"),
    ({"kind": "eval", "success": 0.5}, "eval line: 'step' is missing"),
    ({"step": 1, "ages": {"x": 1}}, "step line: 'ages' has the key 'x', which is not an integer"),
    ({"step": 1, "group_ids": [1]}, "step line: 'group_ids' must be a list of strings"),
    ({"step": 1, "window": 3}, "step line: 'window' must be an object"),
    ({"kind": "warmstart", "step": True}, "warmstart line: 'step' must be an integer"),
    ([1, 2], "not a JSON object but list"),
])
def test_a_bad_value_names_its_kind_and_field(line, error):
    with pytest.raises(ForgeError, match=error.replace("(", r"\(")):
        parse_line(line)


def test_read_state_is_a_dict_or_empty(tmp_path):
    assert read_state(tmp_path) == {}
    (tmp_path / "train_state.json").write_text("{not json")
    assert read_state(tmp_path) == {}
    (tmp_path / "train_state.json").write_text("[1]")
    assert read_state(tmp_path) == {}
    (tmp_path / "train_state.json").write_text('{"status": "finished", "step": 3}')
    assert read_state(tmp_path) == {"status": "finished", "step": 3}
