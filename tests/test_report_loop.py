"""``forge report`` shows every field the training loop writes: a short real run on CPU, then its
report, checked field by field against the lines the loop wrote; the records read those lines
back exactly as the loop built them, and TensorBoard got every number of them."""

from __future__ import annotations

import asyncio
import json
from dataclasses import fields

import pytest

from forge_cli.config import load_config
from forge_cli.records.metrics import EvalMetrics, StepMetrics, parse_line

SCRIPTED = {"model.engine.type": "scripted", "model.engine.policy": "forge_cli.tasks.demo_policies:calc",
            "gateway.port": 0, "gateway.socket": "", "pool.max_active_groups": 2, "train.groups_per_step": 1,
            "train.group_size": 2, "train.engine": "torch", "train.lr": 1e-3, "rollout.scaffold": "tool-call",
            "rollout.task": "calc", "rollout.concurrency": 4, "train.eval_tasks": 2, "train.eval_samples": 2,
            "train.eval_every": 2, "train.checkpoint_every": 0}


def _tags(run) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = list((run / "tensorboard").glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events))
    acc.Reload()
    return set(acc.Tags()["scalars"])


@pytest.mark.slow
def test_forge_report_shows_every_field_the_loop_writes(cli, tiny_model, tmp_path):
    from forge_cli.train.loop import train_loop

    runs = tmp_path / "runs"
    config = load_config(env={}, overrides={**SCRIPTED, "model.path": str(tiny_model), "run.dir": str(runs)})
    seen: list[tuple[str, object]] = []
    asyncio.run(train_loop(config, run="shown", steps=2, on_event=lambda kind, event: seen.append((kind, event))))
    run = runs / "shown"
    raw = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    written = {kind: set().union(*(line.keys() for line in raw if line["kind"] == kind)) - {"kind"} for kind in ("step", "eval")}

    # the file's lines read back as exactly the records the loop handed the display
    assert [parse_line(line) for line in raw] == [event for kind, event in seen if kind in ("step", "eval")]
    # the records hold what the loop writes: a field it never wrote is one documented as optional
    for kind, record in (("step", StepMetrics), ("eval", EvalMetrics)):
        assert all(f.metadata.get("doc") for f in fields(record))
        assert written[kind] <= {f.name for f in fields(record)}
        assert all(f.metadata.get("optional") for f in fields(record) if f.name not in written[kind]), kind

    done = cli("--set", f"run.dir={runs}", "report", "shown", "--dpi", "20")
    assert done.exit_code == 0, done.output
    md = (run / "report" / "summary.md").read_text()
    as_json = cli("--set", f"run.dir={runs}", "report", "shown", "--json", "--dpi", "20")
    per_field = json.loads(as_json.stdout)["runs"][0]["per_field"]
    for kind, keys in written.items():
        for key in keys:
            assert f"| {kind}/{key} |" in md and f"{kind}/{key}" in done.stdout, (kind, key)
            assert key in per_field[kind], (kind, key)
    # the numbers that were written are the figures shown (steps: counters last, the rest means)
    steps = [line for line in raw if line["kind"] == "step"]
    assert per_field["step"]["step"] == 2 and per_field["step"]["policy_version"] == steps[-1]["policy_version"]
    assert per_field["step"]["loss"] == pytest.approx(sum(s["loss"] for s in steps) / 2)
    assert per_field["step"]["group_ids"] == 1 and per_field["step"]["window"] == steps[-1]["window"]

    # TensorBoard: every finite number of a line, under KIND/FIELD (a table's under KIND/FIELD/KEY)
    tags = _tags(run)
    for line in raw:
        for key, value in line.items():
            if key in ("kind", "step", "time_s") or value is None:
                continue
            if isinstance(value, dict):
                assert {f"{line['kind']}/{key}/{k}" for k, v in value.items() if v is not None} <= tags, key
            elif isinstance(value, (int, float)):
                assert f"{line['kind']}/{key}" in tags, key
