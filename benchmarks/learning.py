"""Learning that shows: `forge train` from the shipped warm policy on this machine, per seed, against
a supervised control on the same teacher, CISPO against GRPO at equal steps, under load, and the
completion-time reward against the same run without it.

    python benchmarks/learning.py                      # 3 seeds, every part (hours on 2 cores)
    python benchmarks/learning.py --seeds 0 --parts main,control

Each seed gets a FORGE_HOME of its own; `forge train` on the repository's forge.toml then starts RL
at once from the warm policy Forge ships (forge_cli/engine/warm_policy). *before* is the run's step-0
held-out evaluation of that policy, *after* its final one (the same held-out tasks, several samples
each, sampled at the training temperature). The parts, each from the same shipped weights (but for
``speed``'s runs, which start from a policy made from them):

- ``main``: `forge train --minutes M` (CISPO, the repository's settings);
- ``control``: `forge model warmstart` (supervised, on the same teacher's demonstrations: its slips and
  re-checks) for as long as the seed's RL ran, at the learning rate the shipped warm start ended with,
  held there (not restarting at its peak);
- ``grpo``: `train.loss.type = "grpo"` for as many steps as the seed's CISPO run;
- ``loaded``: ``main`` again with a CPU-bound process beside it (one busy core), as a newcomer's
  machine rarely is idle;
- ``time0``: ``main`` with `rewards.weights.completion_time = 0`: what the completion-time reward does
  to the wall time and tool calls of the solved held-out trajectories;
- ``speed``: the completion-time task. The shipped teacher's re-checks risk a miscopy, so RL without the
  completion-time reward drops them too; here the habit costs only time. A *habit* policy is made first:
  `forge model warmstart` from the shipped weights for ``--habit-minutes`` on a teacher that first tries
  the calculator on 1+1 (`teacher_warmups`, ``--warmups``; no re-checks) at the shipped warm start's end
  learning rate, or ``--habit-model`` names one made beforehand (the shipped recipe from nothing with
  `teacher_warmups` set, so the habit is learned with the copying). From it: RL for ``--minutes`` with the
  repository's completion-time weight or ``--speed-weight`` (``speed``), the same with the weight 0 (``speed0``), and the SFT control on the habit teacher for
  as long as ``speed``'s RL ran (``speedcontrol``). It needs no main run. The row's ``speed_time_reduction`` is 1 − (seconds of the solved held-out
  trajectories with the weight) / (with 0); ``speed_calls_reduction`` the same of their tool calls;
  ``speed_train_time_reduction`` and ``speed_train_completions_reduction`` the same of the solved
  trajectories each run sampled for training in its last quarter (hundreds, where a held-out evaluation
  solves a score: the steadier figure), ``speed_train_first`` / ``_last`` their counts and means;
  ``speed_train_warmups_reduction`` the same of their warm-up calls, and ``speed_train_time_headroom`` the
  most the reward can take: 1 − (weight 0's last-quarter seconds without its warm-up turns) / (with them);
  ``speed_train_paced_time_reduction`` the time reduction at each run's own pace (the machine's speed
  drifts between runs): 1 − r / r₀, r a run's last-quarter seconds over the same trajectories' seconds
  without their warm-up turns;
- ``speedeval``: the speed part's three final policies (the RL runs' last checkpoints, the SFT control's
  model) side by side, as the brief measures speed: ``--eval-rounds`` rounds, each a `forge rollout` of
  every policy in turn on the same held-out tasks (``--eval-tasks`` × ``--eval-samples``), the order
  turning each round, no training beside them; ``speedeval_time_reduction`` is the median over the rounds
  of 1 − (the solved trajectories' mean seconds with the weight) / (with 0), ``…_vs_control`` the same
  against the SFT control, ``speedeval_completions_reduction`` the same of their completions.

`--parts` says what to run; each seed's row is read from whichever of its runs are in --work
(`--parts none` only aggregates); `--merge` keeps the seeds already in the JSON that this call does
not measure (seeds run in separate sittings), and a seed whose main run is not in --work takes its
main run's figures from there (``--seeds 1 --parts control --merge``: the control of an earlier main run). Prints a table and writes benchmarks/results/learning.json.
"""

from __future__ import annotations

import argparse
import itertools
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

PARTS = ("main", "control", "grpo", "loaded", "time0", "speed", "speedeval")


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


class Hog:
    """Another CPU-bound process on the machine while a run trains (a busy loop on one core)."""

    def __enter__(self) -> "Hog":
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc: Any) -> None:
        self.proc.kill()
        self.proc.wait()


def read(run_dir: Path) -> Any:
    from forge_cli.report.metrics import read_metrics

    return read_metrics(run_dir)


def rl_row(run_dir: Path) -> dict:
    """before/after/best and how fast a `forge train` run went; its held-out curve."""
    run = read(run_dir)
    evals, steps = run.evals, run.steps
    first = evals[0] if evals and evals[0].step == 0 else None
    last = evals[-1] if evals else None
    rl_s = steps[-1].time_s if steps else 0.0
    row = {"before": first.success if first else None, "after": last.success if last else None,
           "best": max((e.success for e in evals), default=None), "rl_steps": len(steps), "rl_s": rl_s,
           "curve": [[e.step, e.success] for e in evals],
           "solved_seconds": last.solved_seconds if last else None,
           "solved_tool_calls": last.solved_tool_calls if last else None,
           "before_solved_seconds": first.solved_seconds if first else None,
           "before_solved_tool_calls": first.solved_tool_calls if first else None,
           "samples_per_hour": 3600 * sum(s.trajectories for s in steps) / rl_s if rl_s else None}
    row["gain"] = row["after"] - row["before"] if None not in (row["after"], row["before"]) else None
    return row


def warmup_turns(completions: list) -> list[int]:
    """Which of a trajectory's completions (in order) call the calculator on the habit teacher's warm-up
    expression (``teacher_warmups``), a result the task never uses."""
    from forge_cli.tasks.demo_policies import WARMUP_EXPRESSION

    def warm(call: dict) -> bool:
        args = call.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return False
        return isinstance(args, dict) and str(args.get("expression", "")).replace(" ", "") == WARMUP_EXPRESSION

    return [i for i, c in enumerate(completions) if any(warm(call) for call in c.tool_calls or [])]


def without_warmups(trajectory: Any, seconds: float) -> float:
    """``seconds`` less the spans of the trajectory's warm-up turns, each from its request to the next
    one's (its generation, its tool call, its waits): what it would have taken without them."""
    cs = sorted(trajectory.completions, key=lambda c: c.seq)
    return seconds - sum((cs[i + 1].started_at if i + 1 < len(cs) else cs[i].finished_at) - cs[i].started_at
                         for i in warmup_turns(cs))


def paced(trained: dict) -> float | None:
    """A quarter's mean seconds over the same trajectories' seconds without their warm-up turns: the
    time the habit costs, at the run's own pace (the machine's speed, which drifts by tens of percent
    between runs here, cancels out)."""
    seconds, without = trained.get("seconds"), trained.get("seconds_without_warmups")
    return seconds / without if seconds is not None and without else None


def pool_groups(run_dir: Path, after_index: int | None = None) -> list:
    """A run's groups in queue order (``after_index``: only those after it), read once."""
    from forge_cli.pool.store import DataPool

    pool = DataPool.sqlite(run_dir / "pool.sqlite", create=False)
    try:
        return pool.groups(after_index=after_index)
    finally:
        pool.close()


def solved_figures(trajectories: list) -> dict:
    """The solved ones of ``trajectories``: how many, their mean completions and mean seconds (the
    completion-time reward's own duration), their mean warm-up calls and their mean seconds without the
    warm-up turns."""
    from forge_cli.rewards.components import duration

    solved = [t for t in trajectories if t.status == "completed" and t.rewards.get("outcome", 0.0) >= 1.0]
    timed = [(t, d) for t, d in ((t, duration(t)) for t in solved) if d is not None]
    mean = lambda xs: statistics.fmean(xs) if xs else None
    return {"solved": len(solved), "completions": mean([len(t.completions) for t in solved]),
            "seconds": mean([d for _, d in timed]), "warmups": mean([len(warmup_turns(t.completions)) for t in solved]),
            "seconds_without_warmups": mean([without_warmups(t, d) for t, d in timed])}


def solved_while_training(run_dir: Path, quarter: int) -> dict:
    """The solved trajectories a run sampled for training in one quarter of its training groups (in queue
    order; 0 the first, 3 the last; the held-out evaluations' groups, which the pool keeps below index 0,
    left out): :func:`solved_figures`, what the completion-time reward can at most take among them.
    Hundreds of trajectories, where a held-out evaluation solves a score."""
    if not (run_dir / "pool.sqlite").is_file():
        return solved_figures([])
    groups = pool_groups(run_dir, after_index=-1)  # without the evaluations' groups
    k = len(groups) // 4
    chosen = groups[quarter * k:(quarter + 1) * k] if quarter < 3 else groups[3 * k:]
    return solved_figures([t for g in chosen for t in g.trajectories])


def control_row(run_dir: Path, before: float | None) -> dict:
    rated = [x for x in read(run_dir).warmstart if x.heldout_success is not None]
    last = rated[-1] if rated else None
    after = last.heldout_success if last else None
    return {"control_after": after, "control_gain": after - before if None not in (after, before) else None,
            "control_steps": len(read(run_dir).warmstart), "control_curve": [[x.step, x.heldout_success] for x in rated],
            "control_solved_seconds": last.solved_seconds if last else None,
            "control_solved_tool_calls": last.solved_tool_calls if last else None}


def shipped_end_lr() -> float:
    """The learning rate the shipped warm start ended with (its recipe's peak × final fraction)."""
    from forge_cli.engine.default_model import shipped_warm_dir

    recipe = json.loads((shipped_warm_dir() / "warmstart.json").read_text())["recipe"]
    return float(recipe["train.warmstart.lr"]) * float(recipe["train.warmstart.final_lr_fraction"])


def reduction(fast: float | None, slow: float | None) -> float | None:
    return 1.0 - fast / slow if fast is not None and slow else None


def seed_row(seed: int, args: argparse.Namespace, parts: set[str], overrides: dict[str, str],
             kept: dict | None = None) -> dict:
    """The seed's row: its main run's (from --work, or ``kept``, the row --merge found in --out when the
    main run is not in --work) with whatever other parts ran or are in --work laid over it."""
    from forge_cli.engine.default_model import shipped_warm_dir

    home, runs = args.work / f"home-s{seed}", args.work / "runs"
    sets = {**overrides, "run.seed": str(seed)}
    minutes = str(args.minutes)

    def train(name: str, *extra: str, more: dict[str, str] | None = None) -> Path:
        run_dir = runs / f"{name}-s{seed}"
        if name in parts:
            shutil.rmtree(run_dir, ignore_errors=True)
            forge(home, runs, "train", "--no-live", "--run", run_dir.name, *extra, sets={**sets, **(more or {})},
                  log=args.work / f"{name}-s{seed}.log")
        return run_dir

    main_run = train("main", "--minutes", minutes)
    if (main_run / "metrics.jsonl").is_file():  # a new main run: what was measured against an older one goes
        row: dict = {"seed": seed, **rl_row(main_run),
                     **{k: v for k, v in (kept or {}).items() if k.startswith("speed")}}  # (the speed part is apart)
    elif kept is not None:  # the main run of an earlier sitting: the other parts are measured against it
        row = dict(kept)
    elif any((runs / f"{part}-s{seed}" / "metrics.jsonl").is_file() for part in PARTS if not part.startswith("speed")):
        raise SystemExit(f"seed {seed}: no main run in {runs} and none in --out to --merge with: its other parts "
                         "are measured against one (run --parts main)")
    else:  # only the speed part, which needs none (a part to run that does was refused before anything ran)
        row = {"seed": seed}
    control = runs / f"control-s{seed}"
    if "control" in parts and row.get("rl_s"):
        shutil.rmtree(control, ignore_errors=True)
        out = args.work / f"control-model-s{seed}"
        shutil.rmtree(out, ignore_errors=True)
        lr = shipped_end_lr()
        forge(home, runs, "model", "warmstart", "--model", str(shipped_warm_dir()), "--out", str(out), "--run", control.name,
              "--target", "1.0", "--minutes", f"{row['rl_s'] / 60:.2f}",
              sets={**sets, "train.warmstart.lr": str(lr), "train.warmstart.final_lr_fraction": "1.0"},
              log=args.work / f"control-s{seed}.log")
    if (control / "metrics.jsonl").is_file():
        row.update(control_row(control, row["before"]))
    # at equal steps: the main run's, with room on the clock (the embedded default's 15 minutes would
    # otherwise stop a run a little slower than the main one short of them)
    grpo = train("grpo", "--steps", str(row["rl_steps"]), "--minutes", str(3 * args.minutes),
                 more={"train.loss.type": "grpo"}) if row.get("rl_steps") else None
    if grpo is not None and (grpo / "metrics.jsonl").is_file():
        g = rl_row(grpo)
        row.update(grpo_after=g["after"], grpo_gain=g["gain"], grpo_best=g["best"], grpo_steps=g["rl_steps"])
    if "loaded" in parts:
        with Hog():
            train("loaded", "--minutes", minutes)
    if (runs / f"loaded-s{seed}" / "metrics.jsonl").is_file():
        g = rl_row(runs / f"loaded-s{seed}")
        row.update(loaded_before=g["before"], loaded_after=g["after"], loaded_gain=g["gain"], loaded_steps=g["rl_steps"])
    time0 = train("time0", "--minutes", minutes, more={"rewards.weights.completion_time": "0"})
    if (time0 / "metrics.jsonl").is_file():
        g = rl_row(time0)
        row.update(time0_after=g["after"], time0_gain=g["gain"], time0_solved_seconds=g["solved_seconds"],
                   time0_solved_tool_calls=g["solved_tool_calls"])
        row["completion_time_reduction"] = reduction(row["solved_seconds"], g["solved_seconds"])
        row["tool_calls_reduction"] = reduction(row["solved_tool_calls"], g["solved_tool_calls"])
        row["completion_time_success_change"] = (row["after"] - g["after"]
                                                 if None not in (row["after"], g["after"]) else None)
    if row.get("control_solved_seconds") is not None:
        row["completion_time_reduction_vs_control"] = reduction(row["solved_seconds"], row["control_solved_seconds"])
    speed = speed_row(seed, args, parts, home, runs, sets)
    if "speedeval" in parts and not speed:
        raise SystemExit(f"seed {seed}: --parts speedeval needs the speed part's runs in {runs} (run --parts speed first)")
    if speed:  # the speed runs in --work replace whatever an earlier sitting's said
        row = {**{k: v for k, v in row.items() if not k.startswith("speed")}, **speed,
               **speedeval_row(seed, args, parts, home, runs, sets)}
    return row


def habit_of(settings: dict) -> dict:
    """How a run's speed part made its habit policy (compared by --merge): trained for --habit-minutes
    from the shipped weights on a teacher with --warmups, or a --habit-model made beforehand (then named
    by its directory's name)."""
    model = settings.get("habit_model")
    return {"habit_minutes": None if model else settings.get("habit_minutes"), "warmups": settings.get("warmups"),
            "habit_model": Path(model).name if model else None, "speed_weight": settings.get("speed_weight")}


def needs_main(parts: set[str]) -> bool:
    """Whether the parts to run are measured against a main run (all but ``speed`` and ``speedeval``)."""
    return bool(parts - {"speed", "speedeval"})


def speed_row(seed: int, args: argparse.Namespace, parts: set[str], home: Path, runs: Path, sets: dict[str, str]) -> dict:
    """The ``speed`` part of a seed: the habit policy, RL from it with and without the completion-time
    reward, and the SFT control on the habit teacher; what of them is in --work."""
    from forge_cli.engine.default_model import shipped_warm_dir

    habit, lr = args.habit_model or args.work / f"habit-model-s{seed}", str(shipped_end_lr())
    teacher = {"train.warmstart.teacher_warmups": str(args.warmups), "train.warmstart.teacher_rechecks": "0",
               "train.warmstart.lr": lr, "train.warmstart.final_lr_fraction": "1.0"}

    def warm(name: str, model: Path, out: Path, minutes: float) -> None:
        shutil.rmtree(runs / f"{name}-s{seed}", ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        forge(home, runs, "model", "warmstart", "--model", str(model), "--out", str(out), "--run", f"{name}-s{seed}",
              "--target", "1.0", "--minutes", f"{minutes:.2f}", sets={**sets, **teacher}, log=args.work / f"{name}-s{seed}.log")

    def rl(name: str, more: dict[str, str]) -> None:
        shutil.rmtree(runs / f"{name}-s{seed}", ignore_errors=True)
        forge(home, runs, "train", "--no-live", "--run", f"{name}-s{seed}", "--minutes", str(args.minutes),
              sets={**sets, "model.path": str(habit), **more}, log=args.work / f"{name}-s{seed}.log")

    def trained(name: str, run_dir: Path) -> dict:  # the training side's solved trajectories, first and last quarter
        return {f"{name}_train_first": solved_while_training(run_dir, 0),
                f"{name}_train_last": solved_while_training(run_dir, 3)}

    if "speed" in parts:
        if not args.habit_model:
            warm("habit", shipped_warm_dir(), habit, args.habit_minutes)
        rl("speed", {} if args.speed_weight is None else {"rewards.weights.completion_time": str(args.speed_weight)})
        rl("speed0", {"rewards.weights.completion_time": "0"})
    out: dict = {}
    if (runs / f"speed-s{seed}" / "metrics.jsonl").is_file():
        r = rl_row(runs / f"speed-s{seed}")
        out = {"speed_before": r["before"], "speed_after": r["after"], "speed_rl_s": r["rl_s"],
               "speed_before_solved_seconds": r["before_solved_seconds"],
               "speed_before_solved_tool_calls": r["before_solved_tool_calls"],
               "speed_solved_seconds": r["solved_seconds"], "speed_solved_tool_calls": r["solved_tool_calls"],
               **trained("speed", runs / f"speed-s{seed}")}
        if "speed" in parts and r["rl_s"]:
            warm("speedcontrol", habit, args.work / f"speedcontrol-model-s{seed}", r["rl_s"] / 60)
    if out and (runs / f"speed0-s{seed}" / "metrics.jsonl").is_file():
        r0 = rl_row(runs / f"speed0-s{seed}")
        out.update(speed0_after=r0["after"], speed0_solved_seconds=r0["solved_seconds"],
                   speed0_solved_tool_calls=r0["solved_tool_calls"], **trained("speed0", runs / f"speed0-s{seed}"),
                   speed_time_reduction=reduction(out["speed_solved_seconds"], r0["solved_seconds"]),
                   speed_calls_reduction=reduction(out["speed_solved_tool_calls"], r0["solved_tool_calls"]),
                   speed_success_change=(out["speed_after"] - r0["after"]
                                         if None not in (out["speed_after"], r0["after"]) else None))
        fast, slow = out["speed_train_last"], out["speed0_train_last"]
        out.update(speed_train_time_reduction=reduction(fast["seconds"], slow["seconds"]),
                   speed_train_completions_reduction=reduction(fast["completions"], slow["completions"]),
                   # the most the reward can take: weight 0's solved trajectories without their warm-up turns
                   speed_train_time_headroom=reduction(slow.get("seconds_without_warmups"), slow["seconds"]),
                   speed_train_warmups_reduction=reduction(fast.get("warmups"), slow.get("warmups")),
                   speed_train_paced_time_reduction=reduction(paced(fast), paced(slow)))
    if out and (runs / f"speedcontrol-s{seed}" / "metrics.jsonl").is_file():
        c = control_row(runs / f"speedcontrol-s{seed}", out["speed_before"])
        out.update(speedcontrol_after=c["control_after"], speedcontrol_solved_seconds=c["control_solved_seconds"],
                   speedcontrol_solved_tool_calls=c["control_solved_tool_calls"],
                   speed_time_reduction_vs_control=reduction(out["speed_solved_seconds"], c["control_solved_seconds"]))
    return out


SPEED_POLICIES = ("speed", "speed0", "speedcontrol")


def final_policy(name: str, seed: int, work: Path) -> Path | None:
    """The policy a speed-part run ended with: an RL run's last checkpoint, the SFT control's saved model."""
    if name == "speedcontrol":
        folder = work / f"speedcontrol-model-s{seed}"
        return folder if (folder / "config.json").is_file() else None
    pointer = work / "runs" / f"{name}-s{seed}" / "checkpoints" / "latest"
    return pointer.parent / pointer.read_text().strip() / "model" if pointer.is_file() else None


def solved_in(run_dir: Path) -> dict:
    """A `forge rollout`'s trajectories: how many, its success rate and :func:`solved_figures`."""
    trajectories = [t for g in pool_groups(run_dir) for t in g.trajectories]
    figures = solved_figures(trajectories)
    return {"trajectories": len(trajectories),
            "success": figures["solved"] / len(trajectories) if trajectories else None, **figures}


def speedeval_row(seed: int, args: argparse.Namespace, parts: set[str], home: Path, runs: Path, sets: dict[str, str]) -> dict:
    """The speed part's policies measured side by side: ``--eval-rounds`` rounds, each a `forge rollout` of
    every final policy in turn (the order turning round by round) on the same held-out tasks, so the
    machine's drifting speed weighs on each alike; per round the ratios of their solved trajectories'
    seconds and completions, and their medians over the rounds. What of it is in --work."""
    policies = {name: final_policy(name, seed, args.work) for name in SPEED_POLICIES}
    policies = {name: path for name, path in policies.items() if path is not None}
    name_of = lambda policy, k: f"speedeval-{policy}-r{k}-s{seed}"
    if "speedeval" in parts and not {"speed", "speed0"} <= set(policies):
        raise SystemExit(f"seed {seed}: --parts speedeval needs the speed part's final policies in {args.work} "
                         f"(found {', '.join(policies) or 'none'}; run --parts speed first)")
    if parts & {"speed", "speedeval"}:  # an earlier call's rounds measured other policies
        for old in runs.glob(f"speedeval-*-s{seed}"):
            shutil.rmtree(old)
    if "speedeval" in parts:
        order = list(policies)
        for k in range(args.eval_rounds):
            for policy in order[k % len(order):] + order[:k % len(order)]:
                forge(home, runs, "rollout", "--split", "heldout", "--groups", str(args.eval_tasks), "--n",
                      str(args.eval_samples), "--model", str(policies[policy]), "--run", name_of(policy, k),
                      sets=sets, log=args.work / f"{name_of(policy, k)}.log")
    rounds = []
    for k in itertools.count():  # whatever rounds are in --work
        measured = {p: solved_in(runs / name_of(p, k)) for p in SPEED_POLICIES if (runs / name_of(p, k) / "pool.sqlite").is_file()}
        if not measured:
            break
        rounds.append(measured)
    # a round some rollout of which is missing or empty (stopped early) is left out
    rounds = [r for r in rounds if {"speed", "speed0"} <= set(r) and all(f["success"] is not None for f in r.values())]
    if not rounds:
        return {}

    def median_cut(key: str, other: str) -> float | None:
        cuts = [reduction(r["speed"][key], r[other][key]) for r in rounds if other in r]
        cuts = [c for c in cuts if c is not None]
        return statistics.median(cuts) if cuts else None

    return {"speedeval_rounds": rounds,
            "speedeval_time_reduction": median_cut("seconds", "speed0"),
            "speedeval_completions_reduction": median_cut("completions", "speed0"),
            "speedeval_time_reduction_vs_control": median_cut("seconds", "speedcontrol"),
            "speedeval_completions_reduction_vs_control": median_cut("completions", "speedcontrol"),
            "speedeval_success_change": statistics.fmean(r["speed"]["success"] - r["speed0"]["success"] for r in rounds),
            "speedeval_success_change_vs_control": (
                statistics.fmean(r["speed"]["success"] - r["speedcontrol"]["success"] for r in rounds)
                if all("speedcontrol" in r for r in rounds) else None)}


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def change(reduction: float | None) -> str:
    """A reduction as the signed change it is: 0.25 → "-25.0", -0.08 → "+8.0"."""
    return "—" if reduction is None else f"{-100 * reduction:+.1f}"


def fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=15.0, help="forge train's wall-time budget per run")
    parser.add_argument("--parts", default=",".join(PARTS), help=(
        f"what to run: {', '.join(PARTS)} (comma-separated; none: only read the runs already in --work)"))
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "results" / "learning-work")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "learning.json")
    parser.add_argument("--habit-minutes", type=float, default=4.0, help=(
        "speed: how long the habit policy is warm-started on the teacher with warm-up calls"))
    parser.add_argument("--warmups", type=float, default=0.7, help="speed: the habit teacher's teacher_warmups")
    parser.add_argument("--speed-weight", type=float, default=None, help=(
        "speed: the completion-time weight of the speed run (default: the repository's)"))
    parser.add_argument("--habit-model", type=Path, default=None, help=(
        "speed: a habit policy made beforehand (e.g. the shipped recipe with teacher_warmups set, from "
        "nothing) instead of --habit-minutes of training from the shipped weights"))
    parser.add_argument("--eval-rounds", type=int, default=3, help=(
        "speedeval: rounds of the side-by-side held-out evaluation of the speed part's final policies"))
    parser.add_argument("--eval-tasks", type=int, default=32, help="speedeval: held-out tasks a round")
    parser.add_argument("--eval-samples", type=int, default=8, help="speedeval: trajectories a task a round")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="a forge.toml override for every run (forge --set), e.g. train.lr=2e-4")
    parser.add_argument("--merge", action="store_true", help=(
        "keep the seeds already in --out that this call does not run or read (the same --minutes and --set "
        "only) and average over all of them: seeds measured in separate sittings"))
    args = parser.parse_args()
    parts = set(args.parts.split(",")) - {"none"}
    if parts - set(PARTS):
        raise SystemExit(f"unknown parts: {', '.join(sorted(parts - set(PARTS)))} (known: {', '.join(PARTS)})")
    if args.habit_model and not (args.habit_model / "config.json").is_file():
        raise SystemExit(f"--habit-model {args.habit_model}: not a model directory (no config.json)")
    (args.work / "runs").mkdir(parents=True, exist_ok=True)
    overrides = dict(item.split("=", 1) for item in args.sets)
    kept: dict = {}
    if args.merge and args.out.is_file():
        kept = json.loads(args.out.read_text())
        if kept.get("minutes") != args.minutes or kept.get("overrides", {}) != overrides:
            raise SystemExit(f"--merge: {args.out} was measured with --minutes {kept.get('minutes')} and "
                             f"--set {kept.get('overrides', {})}, not {args.minutes} and {overrides}")
        # the speed rows this call keeps (not those it measures again) must share its habit: none is averaged
        # with another habit's, and a call that measures every kept one again may change it
        again = {seed for seed in args.seeds
                 if "speed" in parts or (args.work / "runs" / f"speed-s{seed}" / "metrics.jsonl").is_file()}
        speed_kept = any("speed_before" in r for r in kept.get("seeds", []) if r["seed"] not in again)
        if speed_kept and habit_of(kept) != habit_of(vars(args)):
            flags = lambda h: " ".join(f"--{k.replace('_', '-')} {v}" for k, v in h.items() if v is not None)
            raise SystemExit(f"--merge: {args.out}'s speed part was measured with {flags(habit_of(kept))}, "
                             f"not {flags(habit_of(vars(args)))}")
    kept_rows = {r["seed"]: r for r in kept.get("seeds", [])}
    missing = [seed for seed in args.seeds if needs_main(parts) and "main" not in parts and seed not in kept_rows
               and not (args.work / "runs" / f"main-s{seed}" / "metrics.jsonl").is_file()]
    if missing:  # before anything runs
        raise SystemExit(f"seed {', '.join(map(str, missing))}: no main run in {args.work / 'runs'} and none in --out "
                         "to --merge with (run --parts main, or only --parts speed)")
    seeds = []
    for seed in args.seeds:
        seeds.append(seed_row(seed, args, parts, overrides, kept_rows.get(seed)))
        print(json.dumps({k: v for k, v in seeds[-1].items() if "curve" not in k}), flush=True)

    command = " ".join(["python", "benchmarks/learning.py", *sys.argv[1:]])
    commands = [command]
    if kept:
        now = {r["seed"] for r in seeds}
        seeds = sorted([r for r in kept["seeds"] if r["seed"] not in now] + seeds, key=lambda r: r["seed"])
        commands = [*kept.get("commands", [kept["command"]]), command]

    def mean(key: str) -> float | None:
        values = [r[key] for r in seeds if r.get(key) is not None]
        return statistics.fmean(values) if values else None

    result = {"date": time.strftime("%Y-%m-%d"), "command": command, "commands": commands,
              "minutes": args.minutes, "overrides": overrides, **habit_of(vars(args)), "seeds": seeds,
              "mean_before": mean("before"), "mean_after": mean("after"), "mean_gain": mean("gain"),
              "sft_control_mean_gain": mean("control_gain"), "grpo_mean_gain": mean("grpo_gain"),
              "loaded_mean_gain": mean("loaded_gain"),
              "completion_time_reduction": mean("completion_time_reduction"),
              "tool_calls_reduction": mean("tool_calls_reduction"),
              "completion_time_success_change": mean("completion_time_success_change"),
              "completion_time_reduction_vs_control": mean("completion_time_reduction_vs_control"),
              "speed_time_reduction": mean("speed_time_reduction"), "speed_calls_reduction": mean("speed_calls_reduction"),
              "speed_success_change": mean("speed_success_change"),
              "speed_train_time_reduction": mean("speed_train_time_reduction"),
              "speed_train_completions_reduction": mean("speed_train_completions_reduction"),
              "speed_train_time_headroom": mean("speed_train_time_headroom"),
              "speed_train_warmups_reduction": mean("speed_train_warmups_reduction"),
              "speed_train_paced_time_reduction": mean("speed_train_paced_time_reduction"),
              "speedeval_time_reduction": mean("speedeval_time_reduction"),
              "speedeval_completions_reduction": mean("speedeval_completions_reduction"),
              "speedeval_time_reduction_vs_control": mean("speedeval_time_reduction_vs_control"),
              "speedeval_completions_reduction_vs_control": mean("speedeval_completions_reduction_vs_control"),
              "speedeval_success_change": mean("speedeval_success_change"),
              "speedeval_success_change_vs_control": mean("speedeval_success_change_vs_control"),
              "speed_time_reduction_vs_control": mean("speed_time_reduction_vs_control")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\n{'seed':>4} {'before':>7} {'after':>7} {'gain':>6} {'control':>8} {'grpo':>6} {'loaded':>7} "
          f"{'time0':>6} {'s solved':>9} {'calls':>6} {'RL steps':>8}")
    for r in seeds:
        print(f"{r['seed']:>4} {pct(r.get('before')):>7} {pct(r.get('after')):>7} {pct(r.get('gain')):>6} {pct(r.get('control_gain')):>8} "
              f"{pct(r.get('grpo_gain')):>6} {pct(r.get('loaded_gain')):>7} {pct(r.get('time0_gain')):>6} "
              f"{pct(r.get('completion_time_reduction')):>9} {pct(r.get('tool_calls_reduction')):>6} {r.get('rl_steps', '—'):>8}")
    cut = lambda key: change(result[key])
    print(f"mean gain {pct(result['mean_gain'])}, SFT control {pct(result['sft_control_mean_gain'])}, "
          f"GRPO {pct(result['grpo_mean_gain'])}, loaded {pct(result['loaded_mean_gain'])} points; completion time "
          f"{cut('completion_time_reduction')} % against weight 0")
    speed = [r for r in seeds if r.get("speed_train_last")]
    if speed:
        print(f"\nspeed part (weight {result['speed_weight']}; held-out success with the weight / at 0; solved training "
              "trajectories, last quarter: completions, warm-ups, seconds with the weight / at 0, time cut, at each run's "
              "pace, at most; the in-run held-out evaluation: calls cut, seconds against the SFT control)")
        print(f"{'seed':>4} {'held-out':>13} {'completions':>11} {'warm-ups':>9} {'seconds':>11} {'time':>6} "
              f"{'paced':>6} {'at most':>7} {'calls':>6} {'vs SFT':>6}")
        for r in speed:
            w, z = r["speed_train_last"], r.get("speed0_train_last") or {}
            pair = lambda key, f: f"{fmt(w.get(key), f)}/{fmt(z.get(key), f)}"
            print(f"{r['seed']:>4} {pct(r.get('speed_after')):>6}/{pct(r.get('speed0_after')):<6} "
                  f"{pair('completions', '.2f'):>11} {pair('warmups', '.2f'):>9} {pair('seconds', '.2f'):>11} "
                  f"{change(r.get('speed_train_time_reduction')):>6} {change(r.get('speed_train_paced_time_reduction')):>6} "
                  f"{change(r.get('speed_train_time_headroom')):>7} {change(r.get('speed_calls_reduction')):>6} "
                  f"{change(r.get('speed_time_reduction_vs_control')):>6}")
    print(f"speed task, against weight 0: held-out time {cut('speed_time_reduction')} %, calls "
          f"{cut('speed_calls_reduction')} %; time {cut('speed_time_reduction_vs_control')} % against its SFT control; "
          f"while training (last quarter): time {cut('speed_train_time_reduction')} % (at each run's own pace "
          f"{cut('speed_train_paced_time_reduction')} %; at most {cut('speed_train_time_headroom')} %: weight 0 without "
          f"its warm-up turns), completions {cut('speed_train_completions_reduction')} %, warm-ups "
          f"{cut('speed_train_warmups_reduction')} %; side by side (the final policies, medians over rounds): time "
          f"{cut('speedeval_time_reduction')} %, completions {cut('speedeval_completions_reduction')} % against weight 0, "
          f"time {cut('speedeval_time_reduction_vs_control')} %, completions "
          f"{cut('speedeval_completions_reduction_vs_control')} % against the SFT control -> {args.out}")


if __name__ == "__main__":
    main()
