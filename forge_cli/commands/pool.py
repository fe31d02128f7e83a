"""``forge pool stats|show|export``: look inside a run's data pool.

These commands only read: a run is named by its name under ``run.dir`` or by the path of an
existing run folder, and a pool that is not there is never created.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import typer
from rich.table import Table

from forge_cli.commands._common import get_state, print_json
from forge_cli.console import console, err_console, warn
from forge_cli.engine.default_model import resolve_model_path
from forge_cli.errors import ForgeError
from forge_cli.pool.scheduler import window_size
from forge_cli.pool.store import NoPool, open_pool
from forge_cli.runs import list_runs, resolve_run, run_config

RUN_HELP = "Run name (under run.dir), or the path of an existing run folder."


def _open(run: str) -> tuple[Any, Any, Any]:
    """(pool, run config, run folder) for a run name or path; never creates a pool."""
    config = get_state().config()
    run_dir = resolve_run(config, run)
    cfg = run_config(config, run_dir)
    return open_pool(cfg.pool.url, run_dir, create=False), cfg, run_dir


def _find(trajectory: str, run: str, *, any_run: bool) -> tuple[Any, Any] | None:
    """(the trajectory, its run folder) if that run holds it. Looking through ``any_run``, a run
    that recorded nothing (no pool) holds none; a run named by the user must have a pool."""
    try:
        pool, _, run_dir = _open(run)
    except NoPool:
        if not any_run:
            raise
        return None
    with pool:
        return (pool.trajectory(trajectory), run_dir) if pool.has_trajectory(trajectory) else None


def _run_tokenizer(run_dir: Any) -> Any:
    """The tokenizer of the model the run recorded with (its saved config's ``model.path``)."""
    cfg = run_config(get_state().config(), run_dir)
    try:
        from transformers import AutoTokenizer  # heavy: only for --text

        return AutoTokenizer.from_pretrained(resolve_model_path(cfg.model.path))
    except (OSError, ValueError) as exc:
        raise ForgeError(f"cannot decode the run's tokens: its model {cfg.model.path or 'the embedded default'} "
                         f"does not load ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def print_transcript(completions: list[Any], tokenizer: Any) -> None:
    """Each completion as text: what its prompt adds to the previous completion's prompt and output
    (the whole prompt for the first, and where a prompt drifted from what was sampled), then its output."""
    before: list[int] = []
    for c in completions:
        same = 0
        for a, b in zip(before, c.prompt_ids):
            if a != b:
                break
            same += 1
        head = f"seq {c.seq} prompt" + (f" (+{len(c.prompt_ids) - same} tokens)" if same else f" ({len(c.prompt_ids)} tokens)")
        if before and same < len(before):
            head += f" — differs from what came before at token {same}"
        console.print(f"[bold]{head}[/]", highlight=False)
        console.print(tokenizer.decode(c.prompt_ids[same:]), soft_wrap=True, highlight=False, markup=False)
        console.print(f"[bold green]seq {c.seq} output ({len(c.output_ids)} tokens, {c.finish_reason})[/]", highlight=False)
        console.print(tokenizer.decode(c.output_ids), soft_wrap=True, highlight=False, markup=False)
        before = list(c.prompt_ids) + list(c.output_ids)


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Inspect a run's data pool: counts, the queue and window, trajectories.", no_args_is_help=True)
    app.add_typer(group, name="pool")

    @group.command("stats")
    def stats(
        run: str = typer.Argument(..., help=RUN_HELP),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    ) -> None:
        """Counts by status, the queue head and window, off-policy ages, storage bytes per token."""
        pool, cfg, run_dir = _open(run)
        window = window_size(cfg.pool.scheduler, cfg.pool.max_active_groups)
        with pool:
            data = pool.stats(window=window)
        data["scheduler"] = cfg.pool.scheduler.type
        if as_json:
            print_json(data)
            return
        table = Table(title=f"pool of {run_dir} ({data['backend']})", title_justify="left", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("trajectories", "  ".join(f"{k} {v}" for k, v in data["trajectories"].items()))
        infra = data["infra_failures"]
        table.add_row("infrastructure", (f"{sum(infra.values())} failed for a reason the policy could not cause: "
                                         + ", ".join(f"{k} {v}" for k, v in infra.items()) + " (their groups dropped, not trained)")
                      if infra else "no failures of the infrastructure")
        table.add_row("groups", "  ".join(f"{k} {v}" for k, v in data["groups"].items()))
        q = data["queue"]
        w = "∞" if window is None else str(window)
        span = "" if q["head"] is None or window is None else f"  window [{q['head']}, {q['head'] + window - 1}]"
        table.add_row("queue", f"head {q['head']}  next index {q['next_index']}  {cfg.pool.scheduler.type} W={w}{span}")
        table.add_row("completions", f"{data['completions']}  tokens: prompt {data['tokens']['prompt']}, output {data['tokens']['output']}")
        table.add_row("storage", f"{data['bytes_per_token']} token bytes/token" + (
            f", {data['file_bytes_per_token']} file bytes/token" if data["file_bytes_per_token"] else ""))
        age = data["offpolicy_age"]
        table.add_row("off-policy age", f"mean {age['mean']}  max {age['max']}  over {age['n']} consumed completions"
                      if age["n"] else "none consumed yet")
        console.print(table)
        if data["prompt_history"]:
            drift = Table("scaffold", "tool format", "family", "first", "exact", "reused", "drifted", "drift rate",
                          title="prompt history (token drift)", title_justify="left")
            for row in data["prompt_history"]:
                rate = "–" if row["drift_rate"] is None else f"{100 * row['drift_rate']:.1f} %"
                drift.add_row(row["scaffold"], row["tool_format"], row["family"], *(str(row[k]) for k in ("first", "exact", "reused", "drifted")),
                              rate)
            console.print(drift)

    @group.command("show")
    def show(
        trajectory: str = typer.Argument(..., help="Trajectory id."),
        run: Optional[str] = typer.Option(
            None, "--run", help=RUN_HELP + " Default: every run under run.dir, newest first (one that cannot be read is skipped with a warning)."),
        tokens: bool = typer.Option(False, "--tokens", help="Print each completion's token ids."),
        text: bool = typer.Option(False, "--text", help=(
            "Print the trajectory as text, decoded with its run's tokenizer: the first prompt whole, then each "
            "completion's new prompt tokens and its output.")),
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    ) -> None:
        """One trajectory: status, rewards, events and every completion."""
        found = _find(trajectory, run, any_run=False) if run else None
        if run is None:
            candidates = list_runs(get_state().config())
            skipped = 0
            for candidate in candidates:
                try:
                    found = _find(trajectory, str(candidate), any_run=True)
                except ForgeError as exc:  # one broken run does not hide the others
                    warn(f"skipped run {candidate.name}: {exc}")
                    skipped += 1
                    continue
                if found is not None:
                    break
        if found is None:
            where = f"run {run}" if run else f"{len(candidates)} runs" + (f" ({skipped} skipped)" if skipped else "")
            raise ForgeError(f"no trajectory {trajectory!r} in {where}")
        traj, run_dir = found
        if as_json:
            print_json({**traj.__dict__, "events": [e.__dict__ for e in traj.events], "completions": [c.__dict__ for c in traj.completions]})
            return
        head = Table.grid(padding=(0, 2))
        head.add_column(style="bold")
        head.add_column()
        for key in ("id", "group_id", "task_id", "scaffold", "queue_index", "status", "infra", "reward", "error", "owner"):
            value = getattr(traj, key)
            head.add_row(key, "–" if value is None else str(value.value if hasattr(value, "value") else value))
        head.add_row("run", str(run_dir))
        for name, value in traj.rewards.items():
            head.add_row(f"reward {name}", f"{value:g}")
        console.print(head)
        if traj.events:
            events = Table("at", "kind", "data", title="events", title_justify="left")
            for e in traj.events:
                events.add_row(f"{e.at:.3f}", e.kind, str(e.data))
            console.print(events)
        comps = Table("seq", "prompt", "output", "version", "finish", "mean logprob", "tool format", "parse errors", "history",
                      title="completions", title_justify="left")
        for c in traj.completions:
            mean = sum(c.output_logprobs) / len(c.output_logprobs) if c.output_logprobs else 0.0
            comps.add_row(str(c.seq), str(len(c.prompt_ids)), str(len(c.output_ids)), str(c.policy_version), c.finish_reason,
                          f"{mean:.3f}", c.tool_format or "", str(len(c.parse_errors)), _history(c.history))
        console.print(comps)
        if tokens:
            for c in traj.completions:
                prompt = str(c.prompt_ids)
                if c.history is not None and c.history.kind == "drifted" and c.history.at is not None:
                    # the prompt as sampled before, then where it diverged
                    prompt = f"{c.prompt_ids[:c.history.at]} [red]‖ drifted here ‖[/] {c.prompt_ids[c.history.at:]}"
                console.print(f"[bold]seq {c.seq}[/] prompt {prompt}\n        output {c.output_ids}", soft_wrap=True)
        if text and traj.completions:
            print_transcript(traj.completions, _run_tokenizer(run_dir))

    @group.command("export")
    def export(
        run: str = typer.Argument(..., help=RUN_HELP),
        jsonl: bool = typer.Option(False, "--jsonl", help="One JSON object per trajectory (the only format)."),
        output: Optional[str] = typer.Option(None, "--output", "-o", help="File to write (default: stdout)."),
    ) -> None:
        """Export every trajectory with its group, completions (token ids), events and rewards."""
        if not jsonl:
            raise ForgeError("say --jsonl (the only export format)")
        pool, _, _ = _open(run)
        with pool:
            if output:
                with open(output, "w") as fh:
                    count = pool.export_jsonl(fh)
                err_console.print(f"wrote {count} trajectories to {output}")
            else:
                pool.export_jsonl(sys.stdout)


def _history(history: Any) -> str:
    if history is None:
        return "–"
    return f"drifted at {history.at}" if history.kind == "drifted" else history.kind
