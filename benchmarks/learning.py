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
  the calculator on 1+1 (`teacher_warmups`, ``--warmups``; at most ``--max-warmups`` of them; no re-checks)
  at the shipped warm start's end learning rate, or ``--habit-model`` names one made beforehand (the shipped recipe from nothing with
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
  without their warm-up turns; each quarter's ``by_warmups`` the success rate by warm-up count over all
  its trajectories (flat where the habit costs only time), ``contrast_groups`` the share of its groups
  whose correct runs differ in warm-ups (only there can a group-relative reward see the habit) and
  ``blind_groups`` those whose correct runs all make the same number, and some;
- ``speedmore``: ``speed`` and ``speed0`` go on for ``--minutes`` more each (`forge train --resume`, from
  their last checkpoints with their optimizer, pool and RNG states): a longer run made of two sittings;
  the SFT control is not made again (with ``speed`` in the same call it is made as long as the whole run).
  ``speed_rl_s`` is then the whole run's; the JSON's ``minutes`` stays a sitting's;
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
The speed part's runs, reads and table are in learning_speed.py; what both use in learning_runs.py.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from learning_runs import (
    ROOT,
    Hog,
    change,
    control_row,
    forge,
    pct,
    reduction,
    rl_row,
    shipped_end_lr,
)
from learning_speed import (
    SPEED_MEANS,
    habit_of,
    print_speed_table,
    speed_row,
    speedeval_row,
    unresumable,
)

PARTS = ("main", "control", "grpo", "loaded", "time0", "speed", "speedmore", "speedeval")


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


def needs_main(parts: set[str]) -> bool:
    """Whether the parts to run are measured against a main run (all but the speed part's)."""
    return bool(parts - {"speed", "speedmore", "speedeval"})


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
    parser.add_argument("--max-warmups", type=int, default=2, choices=(1, 2, 3), help=(
        "speed: the habit teacher's teacher_max_warmups (the most warm-up calls in a trace)"))
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
    stuck = unresumable(args.seeds, args.work / "runs") if "speedmore" in parts and "speed" not in parts else []
    if stuck:  # nor is one of them resumed while another cannot be
        raise SystemExit(f"--parts speedmore needs {', '.join(stuck)} in {args.work / 'runs'} (run --parts speed first)")
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
              **{key: mean(key) for key in SPEED_MEANS}}
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
    print_speed_table(result, seeds, args.out)

if __name__ == "__main__":
    main()
