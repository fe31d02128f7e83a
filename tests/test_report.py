"""``forge report``: metrics.jsonl read into records, the summary's figures against the plain
computation from the lines, real PNGs written (one run and several overlaid), and the errors."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_cli.errors import ForgeError
from forge_cli.records.metrics import EvalMetrics, StepMetrics, WarmstartMetrics
from forge_cli.report.metrics import read_metrics
from forge_cli.report.summary import summarize_run

SUITES = ("calc", "kv-search")
SCAFFOLDS = ["pi", "aider", "codex"]


def step_line(rng: random.Random, step: int, time_s: float, *, drop: float = 0.0) -> dict:
    """A random but valid step line (as its record writes it); each key but ``kind``, ``step`` and
    ``time_s`` left out with probability ``drop``, as an older run's line may lack it."""
    take = rng.uniform(0.1, 2.0)
    mix = rng.sample(SCAFFOLDS, rng.choice([0, 2, 3]))  # a step of one scaffold writes no per-scaffold tokens
    line = StepMetrics(
        tokens_by_scaffold={k: float(rng.randint(200, 3000)) for k in mix},
        unique_tokens_by_scaffold={k: float(rng.randint(50, 200)) for k in mix},
        step=step, time_s=time_s,
        policy_version=step, groups=4, samples=rng.randint(4, 40), loss=rng.gauss(0, 1),
        mean_ratio=rng.uniform(0.9, 1.1), reward_mean=rng.uniform(-1, 1),
        rewards={"outcome": rng.random(), "process": -rng.random() / 10, "completion_time": rng.uniform(-0.1, 0.1)},
        success=rng.random(), success_by_suite={s: rng.random() for s in SUITES},
        max_age=rng.randint(0, 4), mean_age=rng.uniform(0, 2), ages={a: rng.randint(0, 9) for a in range(3)},
        tokens=rng.randint(500, 5000), unique_tokens=rng.randint(100, 500),
        rollout_tokens_per_s=rng.uniform(10, 1000), train_tokens_per_s=rng.uniform(10, 1000),
        samples_per_s=rng.uniform(0.1, 10), take_s=take, wait_s=rng.uniform(0, take),
        train_s=rng.uniform(0.1, 5), sync_s=rng.uniform(0, 1), difficulty_mean=rng.choice([None, rng.random()]),
    ).line()
    return {k: v for k, v in line.items() if k in ("kind", "step", "time_s") or rng.random() >= drop}


def run_lines(seed: int, steps: int, *, evals_every: int = 5, drop: float = 0.0) -> list[dict]:
    """A run's lines: a warm start, then steps with a held-out evaluation every few."""
    rng = random.Random(seed)
    lines = [WarmstartMetrics(step=s, time_s=float(s), loss=3.0 / s, tokens=100 * s,
                              heldout_success=rng.random() if s % 2 == 0 else None).line() for s in range(1, 5)]
    t = 5.0
    for s in range(1, steps + 1):
        t += rng.uniform(0.5, 5)
        lines.append(step_line(rng, s, t, drop=drop))
        if s % evals_every == 0:
            lines.append(EvalMetrics(step=s, time_s=t, policy_version=s, split="heldout", success=rng.random(),
                                     success_by_suite={x: rng.random() for x in SUITES}, reward_mean=rng.random(),
                                     tasks=8, samples_per_task=4).line())
    return lines


def write_run(root: Path, name: str, lines: list[dict], *, tail: str = "", state: dict | None = None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + tail)
    if state is not None:
        (run / "train_state.json").write_text(json.dumps(state))
    return run


def plain_summary(lines: list[dict]) -> dict:
    """The summary's figures computed straight from the lines (no resume in them)."""
    steps = [x for x in lines if x.get("kind", "step") == "step"]
    evals = [x for x in lines if x.get("kind") == "eval" and x.get("split", "heldout") == "heldout"]
    warm = [x["heldout_success"] for x in lines if x.get("kind") == "warmstart" and "heldout_success" in x]

    def mean(key, rows):
        vals = [r[key] for r in rows if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    def total(key):
        return sum(r.get(key, 0.0) for r in steps)

    k = max(1, len(steps) // 10)
    step_time = total("take_s") + total("train_s") + total("sync_s")
    tokens = [r["tokens"] for r in steps if "tokens" in r]
    unique = [r["unique_tokens"] for r in steps if "unique_tokens" in r]
    held = [e["success"] for e in evals if "success" in e]
    by_tokens, by_unique = {}, {}
    for r in steps:
        for name, v in r.get("tokens_by_scaffold", {}).items():
            by_tokens[name] = by_tokens.get(name, 0) + v
        for name, v in r.get("unique_tokens_by_scaffold", {}).items():
            by_unique[name] = by_unique.get(name, 0) + v
    return {
        "prefix_saving_by_scaffold": {name: by_tokens[name] / by_unique[name] for name in by_tokens if by_unique.get(name)},
        "steps": steps[-1]["step"] if steps else 0,
        "wall_s": max(x["time_s"] for x in lines),
        "warmstart_heldout": warm[-1] if warm else None,
        "best_heldout": max(held) if held else None,
        "last_heldout": held[-1] if held else None,
        "reward_first": mean("reward_mean", steps[:k]), "reward_last": mean("reward_mean", steps[-k:]),
        "success_first": mean("success", steps[:k]), "success_last": mean("success", steps[-k:]),
        "rollout_tokens_per_s": mean("rollout_tokens_per_s", steps), "train_tokens_per_s": mean("train_tokens_per_s", steps),
        "samples_per_s": mean("samples_per_s", steps),
        "prefix_saving": sum(tokens) / sum(unique) if tokens and unique else None,
        "mean_age": mean("mean_age", steps),
        "max_age": max((r["max_age"] for r in steps if "max_age" in r), default=None),
        "wait_fraction": total("wait_s") / step_time if step_time else None,
        "take_fraction": max(total("take_s") - total("wait_s"), 0) / step_time if step_time else None,
        "train_fraction": total("train_s") / step_time if step_time else None,
        "sync_fraction": total("sync_s") / step_time if step_time else None,
    }


def assert_figures(got: dict, lines: list[dict]) -> None:
    want = plain_summary(lines)
    for key, value in want.items():
        if isinstance(value, dict):
            assert got[key] == pytest.approx(value, rel=1e-9), key
            continue
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12) if value is not None else got[key] is None, key
    assert got["idle_fraction"] == got["wait_fraction"]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 40), drop=st.sampled_from([0.0, 0.3, 0.9]))
def test_the_summary_is_the_plain_computation_from_the_lines(seed, steps, drop):
    from forge_cli.report.summary import as_dict

    lines = run_lines(seed, steps, drop=drop)
    with tempfile.TemporaryDirectory() as tmp:
        run = write_run(Path(tmp), "r", lines)
        assert_figures(as_dict(summarize_run(read_metrics(run))), lines)


def _png_size(path: Path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as img:
        img.verify()
    with Image.open(path) as img:
        assert img.format == "PNG"
        img.load()
        assert len(img.getcolors(1 << 20) or range(1 << 20)) > 2  # not a blank canvas
        return img.size


PLOT_STEMS = {"reward", "success", "reward_components", "throughput", "offpolicy_age", "prefix_saving", "time_split",
              "suite_success"}


def test_forge_report_writes_valid_plots_and_the_summary(cli, tmp_path):
    lines = run_lines(1, 30)
    run = write_run(tmp_path / "runs", "exp", lines, tail='{"kind": "step", "step": 31, "ti')  # cut by a SIGKILL
    result = cli("--set", f"run.dir={tmp_path / 'runs'}", "report", "exp", "--dpi", "30")
    assert result.exit_code == 0, result.output
    out = run / "report"
    assert {p.stem for p in out.glob("*.png")} == PLOT_STEMS | {"summary"}
    for png in out.glob("*.png"):
        w, h = _png_size(png)
        assert 80 <= w <= 2000 and 40 <= h <= 1000, (png.name, w, h)
    summary = json.loads((out / "summary.json").read_text())
    assert [s["name"] for s in summary] == ["exp"]
    assert_figures(summary[0], lines)  # the truncated last line is not a step
    assert summary[0]["steps"] == 30
    md = (out / "summary.md").read_text()
    assert "| steps | 30 |" in md and "held-out success: best / last" in md
    assert "steps" in result.stdout and "trainer idle" in result.stdout and str(out) in result.stdout.replace("\n", "")

    as_json = cli("--set", f"run.dir={tmp_path / 'runs'}", "report", str(run), "--json", "--out", str(tmp_path / "o"), "--dpi", "20")
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert data["out"] == str(tmp_path / "o") and data["runs"][0]["steps"] == 30
    assert all(Path(f).is_file() for f in data["files"])


def test_forge_report_overlays_several_runs(cli, tmp_path):
    root = tmp_path / "runs"
    a, b = run_lines(2, 12), run_lines(3, 20, drop=0.2)
    write_run(root, "base", a)
    write_run(root, "other", b)
    result = cli("--set", f"run.dir={root}", "report", "base", "other", "--dpi", "25")
    assert result.exit_code == 0, result.output
    out = root / "base" / "report" / "compare-other"
    summary = json.loads((out / "summary.json").read_text())
    assert [s["name"] for s in summary] == ["base", "other"]
    assert_figures(summary[0], a)
    assert_figures(summary[1], b)
    assert "| figure | base | other |" in (out / "summary.md").read_text()
    assert "reward.png" in {p.name for p in out.iterdir()}
    assert "base" in result.stdout and "other" in result.stdout


def test_an_overlaid_figure_draws_each_run_under_its_name(tmp_path):
    from forge_cli.report import plots

    runs = [read_metrics(write_run(tmp_path, name, run_lines(seed, 9))) for name, seed in (("a", 4), ("b", 5))]
    fig = plots.reward(runs)
    by_step, by_time = fig.axes
    for ax, x in ((by_step, "step"), (by_time, "time_s")):
        drawn = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}
        assert set(drawn) == {"a", "b"}
        for run in runs:
            assert drawn[run.name] == ([getattr(s, x) for s in run.steps], [s.reward_mean for s in run.steps])
    fig = plots.success(runs)
    labels = {line.get_label() for line in fig.axes[0].get_lines()}
    assert {"a · train", "a · held-out eval", "b · train", "b · held-out eval", "a · warm start", "b · warm start"} <= labels


def test_the_success_plot_marks_the_starting_policys_rate(tmp_path):
    """A run that started from the shipped warm policy (no warm start of its own) gets a dotted line
    at its step-0 held-out rate, labelled with what it started from."""
    from forge_cli.report import plots

    lines = [line for line in run_lines(6, 9) if line["kind"] != "warmstart"]
    state = {"first_heldout_success": 0.1875, "starting_policy": "the shipped warm policy"}
    run = read_metrics(write_run(tmp_path, "shipped", lines, state=state))
    drawn = {line.get_label(): list(line.get_ydata()) for line in plots.success([run]).axes[0].get_lines()}
    assert drawn["start: shipped warm policy"] == [0.1875, 0.1875]
    plain = read_metrics(write_run(tmp_path, "plain", lines))  # nothing measured at step 0: no line
    assert not [k for k in (line.get_label() for line in plots.success([plain]).axes[0].get_lines()) if "start" in k]


def test_a_corrupt_middle_line_is_an_error_naming_the_file_and_line(cli, tmp_path):
    root = tmp_path / "runs"
    run = write_run(root, "bad", run_lines(6, 5))
    text = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    text[3] = '{"kind": "step", "st\n'
    (run / "metrics.jsonl").write_text("".join(text))
    result = cli("--set", f"run.dir={root}", "report", "bad")
    assert result.exit_code == 1
    assert f"{run / 'metrics.jsonl'} line 4: not valid JSON" in result.output.replace("\n", "")
    assert not (run / "report").exists() or not any((run / "report").iterdir())

    text[3] = json.dumps({"kind": "step", "step": 3, "loss": "low"}) + "\n"
    (run / "metrics.jsonl").write_text("".join(text))
    with pytest.raises(ForgeError, match=r"metrics.jsonl line 4: step line: 'loss' must be a number, got 'low'"):
        read_metrics(run)
    text[3] = '[1, 2]\n'
    (run / "metrics.jsonl").write_text("".join(text))
    with pytest.raises(ForgeError, match="line 4: not a JSON object"):
        read_metrics(run)
    text[3] = json.dumps({"kind": "eval", "success": 0.5}) + "\n"
    (run / "metrics.jsonl").write_text("".join(text))
    with pytest.raises(ForgeError, match="line 4: eval line: 'step' is missing"):
        read_metrics(run)


def test_a_truncated_last_line_is_skipped_but_a_complete_bad_last_line_is_not(tmp_path):
    lines = run_lines(7, 6)
    run = write_run(tmp_path, "r", lines, tail='{"kind": "eval", "step": 7, "succ')
    assert [s.step for s in read_metrics(run).steps] == [1, 2, 3, 4, 5, 6]
    (run / "metrics.jsonl").write_text((run / "metrics.jsonl").read_text() + "\n")  # it ended: not cut short
    with pytest.raises(ForgeError, match=f"line {len(lines) + 1}: not valid JSON"):
        read_metrics(run)


def test_a_resumed_run_keeps_the_later_line_of_a_step(tmp_path):
    rng = random.Random(8)
    first = [step_line(rng, s, float(s)) for s in range(1, 6)]
    again = [step_line(rng, s, float(s) + 0.5) for s in range(4, 8)]  # resumed from the checkpoint of step 3
    run = write_run(tmp_path, "r", first + again)
    steps = read_metrics(run).steps
    assert [s.step for s in steps] == [1, 2, 3, 4, 5, 6, 7]
    assert [s.time_s for s in steps] == [1.0, 2.0, 3.0, 4.5, 5.5, 6.5, 7.5]
    assert [s.loss for s in steps] == [x["loss"] for x in first[:3] + again]


def test_lines_missing_keys_and_unknown_kinds_still_report(cli, tmp_path):
    """A run written before every key existed (step, loss, reward only; no kind, no time) still reports."""
    root = tmp_path / "runs"
    lines = [{"step": s, "policy_version": s, "loss": 1.0 / s, "reward_mean": s / 10, "success": 0.1 * s,
              "packed_tokens": 99} for s in range(1, 6)]
    lines.insert(2, {"kind": "future-kind", "step": 1, "whatever": [1]})
    write_run(root, "old", lines)
    result = cli("--set", f"run.dir={root}", "report", "old", "--dpi", "20")
    assert result.exit_code == 0, result.output
    out = root / "old" / "report"
    assert {p.stem for p in out.glob("*.png")} == {"reward", "success", "summary"}  # no data, no figure
    summary = json.loads((out / "summary.json").read_text())[0]
    assert summary["steps"] == 5 and summary["wall_s"] is None and summary["train_fraction"] is None
    assert summary["reward_first"] == pytest.approx(0.1) and summary["reward_last"] == pytest.approx(0.5)


def test_report_errors_are_one_line(cli, tmp_path):
    root = tmp_path / "runs"
    (root / "empty").mkdir(parents=True)
    (root / "empty" / "config.json").write_text("{}")
    result = cli("--set", f"run.dir={root}", "report", "nope")
    assert result.exit_code == 1 and "no run 'nope'" in result.output
    result = cli("--set", f"run.dir={root}", "report", "empty")
    assert result.exit_code == 1 and "has no metrics yet" in result.output and "does not exist" in result.output
    (root / "empty" / "metrics.jsonl").write_text("\n")
    result = cli("--set", f"run.dir={root}", "report", "empty")
    assert result.exit_code == 1 and "has no metrics yet" in result.output and "is empty" in result.output
    write_run(root, "ok", run_lines(9, 3))
    result = cli("--set", f"run.dir={root}", "report", "ok", "--dpi", "0")
    assert result.exit_code == 1 and "--dpi must be between" in result.output
    result = cli("--set", f"run.dir={root}", "report", "ok", str(root / "ok"))
    assert result.exit_code == 1 and "a run is named twice" in result.output


def test_forge_help_does_not_import_matplotlib():
    code = ("import sys\nfrom forge_cli.cli import build_app\nbuild_app()\n"
            "print([m for m in ('matplotlib', 'PIL', 'numpy') if m in sys.modules])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
