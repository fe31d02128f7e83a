"""Learning that shows: `forge train` from nothing (model init + warm start + RL) on this machine,
per seed, against a control that spends the same extra time on more supervised training, and CISPO
against GRPO at equal steps from the same warm start.

    python benchmarks/learning.py                      # 3 seeds, every part (hours on 2 cores)
    python benchmarks/learning.py --seeds 0 --parts main,control

Each seed gets a FORGE_HOME of its own, so its run creates the default model and warm-starts it
(`forge train` with the repository's forge.toml: the embedded default's settings). "before" is the
warm start's last sampled held-out success, "after" the run's final held-out evaluation (the same
held-out tasks, several samples each). The control starts from the same warm model and runs
`forge model warmstart --target 1.0` for as long as that seed's RL ran. GRPO runs as many steps as
the seed's CISPO run, from the same warm model. Both get the main run's resolved scaffold options.
`--parts` says what to run; each seed's row
is read from whichever of its runs are in --work (`--parts none` only aggregates). Prints a table and writes
benchmarks/results/learning.json (seeds, mean_gain, sft_control_mean_gain, …).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def forge(home: Path, runs: Path, *args: str, sets: dict[str, str] | None = None, log: Path) -> float:
    """Run the forge CLI with the repository's forge.toml; return its wall time in seconds."""
    cmd = [sys.executable, "-m", "forge_cli", "--config", str(ROOT / "forge.toml"), "--set", f"run.dir={runs}"]
    for key, value in (sets or {}).items():
        cmd += ["--set", f"{key}={value}"]
    env = {**os.environ, "FORGE_HOME": str(home)}
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(cmd + list(args), env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}); see {log}")
    return time.monotonic() - started


def lines(run_dir: Path, kind: str) -> list[Any]:
    """The run's lines of ``kind`` as the records the loop wrote (forge_cli.records.metrics)."""
    from forge_cli.report.metrics import read_metrics

    run = read_metrics(run_dir)
    return {"step": run.steps, "eval": run.evals, "warmstart": run.warmstart}[kind]


def scaffold_options(run_dir: Path) -> dict[str, str]:
    """The resolved options of the run's scaffold, as ``--set`` overrides."""
    config = json.loads((run_dir / "config.json").read_text())
    name = config["rollout"]["scaffold"]
    return {f"scaffolds.{name}.{key}": json.dumps(value) for key, value in (config.get("scaffolds") or {}).get(name, {}).items()}


def warm_rate(run_dir: Path) -> float | None:
    rated = [x for x in lines(run_dir, "warmstart") if x.heldout_success is not None]
    return rated[-1].heldout_success if rated else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=15.0, help="forge train's wall-time budget per seed")
    parser.add_argument("--parts", default="main,control,grpo", help=(
        "what to run: main, control, grpo (comma-separated; none: only read the runs already in --work). "
        "Every seed's row is read from whichever of its runs exist"))
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "results" / "learning-work")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "learning.json")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="a forge.toml override for every run (forge --set), e.g. train.warmstart.teacher_slips=0")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.sets)
    parts = set(args.parts.split(","))
    args.work.mkdir(parents=True, exist_ok=True)
    runs = args.work / "runs"
    seeds = []
    for seed in args.seeds:
        home = args.work / f"home-s{seed}"
        sets = {**overrides, "run.seed": str(seed)}
        row: dict = {"seed": seed}
        main_run = runs / f"main-s{seed}"
        if "main" in parts:
            row["wall_s"] = forge(home, runs, "train", "--no-live", "--run", main_run.name, "--minutes", str(args.minutes),
                                  sets=sets, log=args.work / f"main-s{seed}.log")
        evals = lines(main_run, "eval")
        steps = lines(main_run, "step")
        warm = lines(main_run, "warmstart")
        row["before"] = warm_rate(main_run)
        row["after"] = evals[-1].success if evals else None
        row["best"] = max((e.success for e in evals), default=None)
        row["warmstart_steps"] = len(warm)
        row["warmstart_s"] = warm[-1].time_s if warm else 0.0
        row["rl_steps"] = len(steps)
        row["rl_s"] = (steps[-1].time_s - row["warmstart_s"]) if steps else 0.0
        row["gain"] = row["after"] - row["before"] if None not in (row["after"], row["before"]) else None
        row["samples_per_hour"] = 3600 * sum(s.trajectories for s in steps) / row["rl_s"] if row["rl_s"] else None
        row["time_split"] = {k: sum(getattr(s, k) or 0.0 for s in steps) / max(row["rl_s"], 1e-9)
                             for k in ("wait_s", "train_s", "sync_s")}
        warm_model = home / "models" / "default-warm"  # kept only when the warm start reached its target,
        if not (warm_model / "config.json").is_file():  # else the run's step-0 checkpoint: the same weights
            warm_model = main_run / "checkpoints" / "step-00000000" / "model"
        # the control and GRPO get the main run's resolved scaffold options, so all three see the same
        # prompts whatever the defaults (a copy of the embedded default also gets them from its marker)
        same = {**sets, **scaffold_options(main_run)}
        control = runs / f"control-s{seed}"
        if "control" in parts and row["rl_s"]:
            shutil.rmtree(control, ignore_errors=True)
            shutil.rmtree(args.work / f"control-model-s{seed}", ignore_errors=True)
            forge(home, runs, "model", "warmstart", "--model", str(warm_model), "--out", str(args.work / f"control-model-s{seed}"),
                  "--run", control.name, "--target", "1.0", "--minutes", f"{row['rl_s'] / 60:.2f}", sets=same,
                  log=args.work / f"control-s{seed}.log")
        if (control / "metrics.jsonl").is_file():
            row["control_after"] = warm_rate(control)
            row["control_gain"] = row["control_after"] - row["before"] if None not in (row["control_after"], row["before"]) else None
        grpo = runs / f"grpo-s{seed}"
        if "grpo" in parts and row["rl_steps"]:
            shutil.rmtree(grpo, ignore_errors=True)
            forge(home, runs, "train", "--no-live", "--run", grpo.name, "--model", str(warm_model), "--warmstart", "never",
                  "--steps", str(row["rl_steps"]), sets={**same, "train.loss.type": "grpo"}, log=args.work / f"grpo-s{seed}.log")
        if (grpo / "metrics.jsonl").is_file():
            grpo_evals = lines(grpo, "eval")
            row["grpo_after"] = grpo_evals[-1].success if grpo_evals else None
            row["grpo_best"] = max((e.success for e in grpo_evals), default=None)
            row["grpo_steps"] = len(lines(grpo, "step"))
        seeds.append(row)
        print(json.dumps(row), flush=True)

    def mean(key: str) -> float | None:
        values = [r[key] for r in seeds if r.get(key) is not None]
        return statistics.fmean(values) if values else None

    result = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(["python", "benchmarks/learning.py", *sys.argv[1:]]),
              "minutes": args.minutes, "seeds": seeds, "mean_before": mean("before"), "mean_after": mean("after"),
              "mean_gain": mean("gain"), "sft_control_mean_gain": mean("control_gain"), "grpo_mean_after": mean("grpo_after")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\n{'seed':>4} {'before':>7} {'after':>7} {'gain':>7} {'control':>8} {'grpo':>7} {'RL steps':>8} {'RL min':>7}")
    for r in seeds:
        def pct(x: float | None) -> str:
            return "—" if x is None else f"{100 * x:.1f}"
        print(f"{r['seed']:>4} {pct(r['before']):>7} {pct(r['after']):>7} {pct(r['gain']):>7} {pct(r.get('control_gain')):>8} "
              f"{pct(r.get('grpo_after')):>7} {r['rl_steps']:>8} {r['rl_s'] / 60:>7.1f}")
    print(f"mean gain {result['mean_gain']}, SFT control mean gain {result['sft_control_mean_gain']} -> {args.out}")


if __name__ == "__main__":
    main()
