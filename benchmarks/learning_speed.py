"""The speed part of benchmarks/learning.py (``speed``, ``speedmore`` and ``speedeval``, its docstring says
what they measure): the habit policy, RL from it with and without the completion-time reward and the SFT control on
the habit teacher; their solved trajectories read from each run's pool (warm-up turns, time without them);
the final policies side by side through `forge rollout`; the table."""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import statistics
from pathlib import Path
from typing import Any

from learning_runs import (
    change,
    control_row,
    fmt,
    forge,
    pct,
    reduction,
    rl_row,
    shipped_end_lr,
)

# the speed part's figures learning.json averages over the seeds
SPEED_MEANS = ("speed_time_reduction", "speed_calls_reduction", "speed_success_change",
               "speed_train_time_reduction", "speed_train_completions_reduction", "speed_train_time_headroom",
               "speed_train_warmups_reduction", "speed_train_paced_time_reduction",
               "speedeval_time_reduction", "speedeval_completions_reduction", "speedeval_time_reduction_vs_control",
               "speedeval_completions_reduction_vs_control", "speedeval_success_change",
               "speedeval_success_change_vs_control", "speed_time_reduction_vs_control")


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


def is_solved(trajectory: Any) -> bool:
    return trajectory.status == "completed" and trajectory.rewards.get("outcome", 0.0) >= 1.0


def solved_figures(trajectories: list) -> dict:
    """The solved ones of ``trajectories``: how many, their mean completions and mean seconds (the
    completion-time reward's own duration), their mean warm-up calls and their mean seconds without the
    warm-up turns; and over all of them, solved or not, the success rate by number of warm-up calls
    (``by_warmups``: a habit that costs only time leaves it flat; one the policy solves by does not)."""
    from forge_cli.rewards.components import duration

    warm = [(t, len(warmup_turns(t.completions)), is_solved(t)) for t in trajectories]
    solved = [t for t, _, ok in warm if ok]
    timed = [(t, d) for t, d in ((t, duration(t)) for t in solved) if d is not None]
    mean = lambda xs: statistics.fmean(xs) if xs else None
    by_count: dict[int, list[bool]] = {}
    for _, count, ok in warm:
        by_count.setdefault(count, []).append(ok)
    return {"solved": len(solved), "completions": mean([len(t.completions) for t in solved]),
            "seconds": mean([d for _, d in timed]), "warmups": mean([count for _, count, ok in warm if ok]),
            "seconds_without_warmups": mean([without_warmups(t, d) for t, d in timed]),
            "by_warmups": {str(k): {"trajectories": len(v), "success": sum(v) / len(v)} for k, v in sorted(by_count.items())}}


def solved_while_training(run_dir: Path, quarter: int) -> dict:
    """The solved trajectories a run sampled for training in one quarter of its training groups (in queue
    order; 0 the first, 3 the last; the held-out evaluations' groups, which the pool keeps below index 0,
    left out): :func:`solved_figures`, what the completion-time reward can at most take among them.
    Hundreds of trajectories, where a held-out evaluation solves a score. With them, where a group-relative
    reward can see the habit (:func:`warmup_contrast`)."""
    if not (run_dir / "pool.sqlite").is_file():
        return {**solved_figures([]), **warmup_contrast([])}
    groups = pool_groups(run_dir, after_index=-1)  # without the evaluations' groups
    k = len(groups) // 4
    chosen = groups[quarter * k:(quarter + 1) * k] if quarter < 3 else groups[3 * k:]
    return {**solved_figures([t for g in chosen for t in g.trajectories]), **warmup_contrast(chosen)}


def warmup_contrast(groups: list) -> dict:
    """The completion-time reward compares a group's correct runs with each other, and the advantage is
    relative to the group too, so a warm-up habit is seen only where two correct runs of a group differ in
    their warm-up calls (``contrast_groups``, a share of the groups); where they all make the same
    number of them, and some, the habit is out of its sight (``blind_groups``)."""
    counts = [[len(warmup_turns(t.completions)) for t in g.trajectories if is_solved(t)] for g in groups]
    share = lambda n: n / len(groups) if groups else None
    return {"groups": len(groups),
            "contrast_groups": share(sum(len(c) >= 2 and len(set(c)) > 1 for c in counts)),
            "blind_groups": share(sum(len(c) >= 2 and len(set(c)) == 1 and c[0] > 0 for c in counts))}


def habit_of(settings: dict) -> dict:
    """How a run's speed part made its habit policy (compared by --merge): trained for --habit-minutes
    from the shipped weights on a teacher with --warmups (at most --max-warmups; 2 in records older than
    the flag), or a --habit-model made beforehand (then named
    by its directory's name)."""
    model = settings.get("habit_model")
    return {"habit_minutes": None if model else settings.get("habit_minutes"), "warmups": settings.get("warmups"),
            "max_warmups": settings.get("max_warmups", 2),  # older records: the teacher's only cap, two
            "habit_model": Path(model).name if model else None, "speed_weight": settings.get("speed_weight")}


def speed_row(seed: int, args: argparse.Namespace, parts: set[str], home: Path, runs: Path, sets: dict[str, str]) -> dict:
    """The ``speed`` part of a seed: the habit policy, RL from it with and without the completion-time
    reward, and the SFT control on the habit teacher; what of them is in --work."""
    from forge_cli.engine.default_model import shipped_warm_dir

    habit, lr = args.habit_model or args.work / f"habit-model-s{seed}", str(shipped_end_lr())
    teacher = {"train.warmstart.teacher_warmups": str(args.warmups), "train.warmstart.teacher_rechecks": "0",
               "train.warmstart.teacher_max_warmups": str(args.max_warmups),
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
    if "speedmore" in parts:  # both runs go on for --minutes more, from their last checkpoints
        for old in runs.glob(f"speedeval-*-s{seed}"):  # rounds of the policies they are about to leave behind
            shutil.rmtree(old)
        for name in ("speed", "speed0"):
            forge(home, runs, "train", "--no-live", "--resume", f"{name}-s{seed}", "--minutes", str(args.minutes),
                  log=args.work / f"{name}-more-s{seed}.log")
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


def unresumable(seeds: list[int], runs: Path) -> list[str]:
    """The speed runs ``--parts speedmore`` would go on with that have no checkpoint to resume from."""
    return [f"{name}-s{seed}" for seed in seeds for name in ("speed", "speed0")
            if not (runs / f"{name}-s{seed}" / "checkpoints" / "latest").is_file()]


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
    if parts & {"speed", "speedeval"}:  # an earlier call's rounds measured other policies (speedmore clears them itself)
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


def print_speed_table(result: dict, seeds: list[dict], out: Path) -> None:
    """The speed part's table (the seeds that have one) and its means, against weight 0 and the SFT control."""
    cut = lambda key: change(result[key])
    speed = [r for r in seeds if r.get("speed_train_last")]
    if speed:
        print(f"\nspeed part (weight {result['speed_weight']}; held-out success with the weight / at 0; solved training "
              "trajectories, last quarter: completions, warm-ups, seconds with the weight / at 0, time cut, at each run's "
              "pace, at most; the in-run held-out evaluation: calls cut, seconds against the SFT control)")
        print(f"{'seed':>4} {'held-out':>13} {'completions':>11} {'warm-ups':>9} {'seconds':>11} {'time':>6} "
              f"{'paced':>6} {'at most':>7} {'calls':>6} {'vs SFT':>6}")
        for r in speed:
            w, z = r["speed_train_last"], r.get("speed0_train_last") or {}
            pair = lambda key, f, w=w, z=z: f"{fmt(w.get(key), f)}/{fmt(z.get(key), f)}"
            print(f"{r['seed']:>4} {pct(r.get('speed_after')):>6}/{pct(r.get('speed0_after')):<6} "
                  f"{pair('completions', '.2f'):>11} {pair('warmups', '.2f'):>9} {pair('seconds', '.2f'):>11} "
                  f"{change(r.get('speed_train_time_reduction')):>6} {change(r.get('speed_train_paced_time_reduction')):>6} "
                  f"{change(r.get('speed_train_time_headroom')):>7} {change(r.get('speed_calls_reduction')):>6} "
                  f"{change(r.get('speed_time_reduction_vs_control')):>6}")
        for r in speed:  # flat where the habit costs only time
            by = lambda figures: " ".join(f"{k}: {pct(v['success'])} ({v['trajectories']})"
                                          for k, v in (figures or {}).get("by_warmups", {}).items()) or "-"
            seen = lambda figures: (f"groups whose correct runs differ in warm-ups {pct((figures or {}).get('contrast_groups'))} %, "
                                    f"all with the same warm-ups {pct((figures or {}).get('blind_groups'))} %")
            print(f"{r['seed']:>4} success by warm-up calls, last quarter (trajectories): weight "
                  f"{result['speed_weight']}: {by(r['speed_train_last'])}; at 0: {by(r.get('speed0_train_last'))}")
            print(f"{'':>4} where the reward sees the habit, last quarter: weight {result['speed_weight']}: "
                  f"{seen(r['speed_train_last'])}; at 0: {seen(r.get('speed0_train_last'))}")
    print(f"speed task, against weight 0: held-out time {cut('speed_time_reduction')} %, calls "
          f"{cut('speed_calls_reduction')} %; time {cut('speed_time_reduction_vs_control')} % against its SFT control; "
          f"while training (last quarter): time {cut('speed_train_time_reduction')} % (at each run's own pace "
          f"{cut('speed_train_paced_time_reduction')} %; at most {cut('speed_train_time_headroom')} %: weight 0 without "
          f"its warm-up turns), completions {cut('speed_train_completions_reduction')} %, warm-ups "
          f"{cut('speed_train_warmups_reduction')} %; side by side (the final policies, medians over rounds): time "
          f"{cut('speedeval_time_reduction')} %, completions {cut('speedeval_completions_reduction')} % against weight 0, "
          f"time {cut('speedeval_time_reduction_vs_control')} %, completions "
          f"{cut('speedeval_completions_reduction_vs_control')} % against the SFT control -> {out}")

