"""``forge scaffold list|show|add|remove|doctor``: the scaffolds plugins registered, and installing them."""

from __future__ import annotations

import datetime
import difflib
import importlib.metadata
from pathlib import Path
from typing import Any, Optional

import typer
from rich.panel import Panel
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from forge_cli import installer, plugins
from forge_cli.commands._common import config_with, get_state, print_json, registry
from forge_cli.console import columns_that_fit, console, err_console, warn
from forge_cli.errors import ForgeError
from forge_cli.installer import agent_prefix, installed
from forge_cli.plugins import normalise_name
from forge_cli.rollout.smoke import Check, doctor
from forge_cli.rollout.loop import loop_label, loop_status

# `forge scaffold list`'s columns (header -> the row's key), and which give way first to a narrow terminal
# (name, kind and installed stay)
LIST_COLUMNS = {"name": "name", "kind": "kind", "API": "api", "tool format": "tool_format", "context policy": "context_policy",
                "plugin": "plugin", "installed": "installed"}
LIST_DROP_ORDER = ("plugin", "context policy", "tool format", "API")


def _installed_label(spec: Any) -> str:
    if spec.kind == "white":
        return "built-in"
    done = installed(spec)
    return f"yes ({done.version})" if done else "no"


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="List, inspect, install and remove agent scaffolds.", no_args_is_help=True)
    app.add_typer(group, name="scaffold")

    @group.command("list")
    def list_cmd(
        kind: str = typer.Option(None, "--kind", help="Only 'white' or 'black' scaffolds."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Every registered scaffold: kind, the API it speaks, tool format, context policy, source plugin, installed?"""
        if kind not in (None, "white", "black"):
            raise ForgeError(f"--kind must be 'white' or 'black', not {kind!r}")
        entries = [e for e in registry().scaffolds.values() if kind in (None, e.value.kind)]
        rows = [
            {
                "name": e.name,
                "kind": e.value.kind,
                "api": e.value.api,
                "tool_format": e.value.tool_format,
                "context_policy": e.value.context_policy,
                "plugin": e.plugin,
                "installed": _installed_label(e.value),
                "description": e.value.description,
            }
            for e in entries
        ]
        if as_json:
            print_json(rows)
            return
        cells = [{h: str(row[key]) for h, key in LIST_COLUMNS.items()} | {"tool format": row["tool_format"] or "the model's"} for row in rows]
        widths = {h: max([len(h)] + [len(c[h]) for c in cells]) for h in LIST_COLUMNS}
        shown = columns_that_fit(widths, LIST_DROP_ORDER, console.width)
        hidden = [h for h in LIST_COLUMNS if h not in shown]
        caption = f"{', '.join(hidden)}: not shown at {console.width} columns (--json, or a wider terminal)" if hidden else None
        table = Table(title="Forge scaffolds", title_justify="left", caption=caption, caption_justify="left")
        for column in shown:
            table.add_column(column, no_wrap=True)
        for c in cells:
            marked = {h: escape(v) for h, v in c.items()}
            marked["installed"] = f"[{'green' if c['installed'] != 'no' else 'dim'}]{marked['installed']}[/]"
            if c["tool format"] == "the model's":
                marked["tool format"] = "[dim]the model's[/]"
            table.add_row(*(marked[h] for h in shown))
        console.print(table)

    @group.command("show")
    def show(
        name: str = typer.Argument(..., help="Scaffold name."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a panel."),
        measure: bool = typer.Option(True, "--measure/--no-measure", help=(
            "For an installed black-box agent, say how long its first prompt is on the current model (tokens): "
            "measured by really launching the agent once against a scripted gateway of its own on a swe-mini task "
            "and counting its first completion's prompt ids; cached under FORGE_HOME per agent version and tokenizer.")),
        remeasure: bool = typer.Option(False, "--remeasure", help="Measure the first prompt again, ignoring the cache."),
    ) -> None:
        """Everything about one scaffold: its definition, its loop (and whether it resolves), install recipe, launch,
        options and, for an installed black-box agent, the length of its first prompt on the current model."""
        info = _describe(name)
        if measure and "launch" in info:
            if info.get("installed", "no").startswith("no"):
                info["first_prompt"] = {"tokens": None, "text": f"measured once it is installed (forge scaffold add {name})"}
            else:
                with err_console.status(f"measuring {name}'s first prompt (launching it once)…"):
                    info["first_prompt"] = _first_prompt(name, remeasure)
        if as_json:
            print_json(info)
            return
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        for key, value in info.items():
            if key == "options":
                for opt, (current, help_text) in value.items():
                    grid.add_row(f"option {opt}", f"{current!r}  [dim]{help_text}[/]")
            elif key == "launch":
                grid.add_row("launch", " ".join(value["command"]))
                for env_key, env_value in value["env"].items():
                    grid.add_row("", f"{env_key}={env_value}")
                for filename in value["files"]:
                    grid.add_row("", f"writes {filename}")
            elif key == "first_prompt":
                grid.add_row("first prompt", value["text"])
            elif value is not None:
                grid.add_row(key.replace("_", " "), str(value))
        console.print(Panel(grid, title=f"scaffold [bold]{name}[/]", title_align="left"))

    @group.command("add")
    def add(
        target: str = typer.Argument(..., help="A scaffold name, a plugin folder or wheel, or a package requirement."),
        force: bool = typer.Option(False, "--force", help="Reinstall even if already installed."),
    ) -> None:
        """Install a black-box agent into FORGE_HOME, or a plugin (path or package) into this environment."""
        reg = registry()
        if target in reg.scaffolds:
            spec = reg.scaffolds[target].value
            if spec.kind == "white":
                console.print(f"'{target}' is a white-box scaffold run by Forge itself: nothing to install.")
                return
            _add_agent(spec, force)
        else:
            _add_plugin(target, list(reg.scaffolds))

    @group.command("remove")
    def remove(
        target: str = typer.Argument(..., help="A black-box scaffold, or (with --plugin, or by its name) a plugin distribution."),
        plugin: bool = typer.Option(False, "--plugin", help=(
            "Uninstall the plugin distribution that registered TARGET (pip uninstall), and its agents' installs.")),
    ) -> None:
        """Remove a black-box agent's install from FORGE_HOME/agents (the scaffold stays registered), or, with
        --plugin or given a distribution's name, uninstall a plugin and every agent it installed."""
        reg = registry()
        entry = reg.scaffolds.get(target)
        if entry is not None and not plugin:
            if entry.value.kind == "black":
                _remove_agent(entry.value)
                if not reg.plugins[entry.plugin].builtin:
                    console.print(f"[dim]its plugin {entry.plugin} stays installed (forge scaffold remove {target} --plugin "
                                  "uninstalls it)[/]")
                return
            if reg.plugins[entry.plugin].builtin:
                raise ForgeError(f"'{target}' is built into Forge (plugin {entry.plugin}) and cannot be removed")
            raise ForgeError(f"'{target}' is a white-box scaffold: nothing is installed for it; `forge scaffold remove "
                             f"{target} --plugin` uninstalls its plugin {entry.plugin} (and everything it registered)")
        name = entry.plugin if entry is not None else _plugin_named(reg, target)
        if name is None:
            raise ForgeError(f"'{target}' is neither a registered scaffold nor a loaded plugin distribution")
        _uninstall_plugin(reg, name, target)


    @group.command("doctor")
    def doctor_cmd(
        name: str = typer.Argument(..., help="Scaffold name (forge scaffold list)."),
        model: Optional[Path] = typer.Option(None, "--model", help="HF model folder that scores the scripted policy's text (default model.path or the default model)."),
        sandbox: Optional[str] = typer.Option(None, "--sandbox", help="local or docker (default: the scaffold's [scaffolds.NAME] sandbox, else rollout.sandbox)."),
        timeout: float = typer.Option(300.0, "--timeout", help="Seconds the one task may take."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Is this agent ready to train? Registered, installed, its program starts, its sandbox works, and one
        `files` task done through the gateway with its own shell tool (a scripted policy; nothing kept).
        Exits 1 if a check failed."""
        reg = registry()
        spec = reg.scaffold(name)
        config = config_with([("model.path", "--model", str(model) if model else None)])
        backend = sandbox or (config.scaffolds.get(name) or {}).get("sandbox") or config.rollout.sandbox
        if backend not in reg.sandboxes:
            raise ForgeError(f"--sandbox: no sandbox named {backend!r} (registered: {', '.join(sorted(reg.sandboxes))})")

        def config_for(overrides: dict[str, Any]) -> Any:
            return config_with([(key, "--model" if key == "model.path" else f"(the doctor's {key})", value)
                                for key, value in overrides.items()])

        marks = {True: "[green]ok[/]", False: "[red]failed[/]", None: "[dim]skipped[/]"}

        def shown(check: Check) -> None:
            if not as_json:
                console.print(f"{marks[check.ok]:>20}  [bold]{check.name}[/]: {check.detail}")

        if not as_json and spec.kind == "black":
            console.print(f"[bold]{name}[/]: checking (one task takes a minute or so)")
        checks = doctor(spec, reg.scaffolds[name].plugin, config_for, model=model, backend=backend, timeout_s=timeout,
                        on_check=shown)
        if as_json:
            print_json([c.as_dict() for c in checks])
        if any(c.ok is False for c in checks):
            raise typer.Exit(1)


def _remove_agent(spec: Any) -> None:
    """Delete a black-box scaffold's install folder, saying what went."""
    where = installer.agent_prefix(spec.name)
    if installer.remove_agent(spec):
        console.print(f"[green]removed[/] the install of {spec.name} at {where}", soft_wrap=True)
    else:
        console.print(f"{spec.name} is not installed at {where}; nothing to remove", soft_wrap=True)


def _uninstall_plugin(reg: Any, name: str, target: str) -> None:
    """``pip uninstall`` the plugin ``name`` and remove the installs of the black-box agents it registered."""
    info = reg.plugins[name]
    if info.builtin:
        raise ForgeError(f"'{target}' is built into Forge (plugin {name}) and cannot be removed")
    dist = name.split(":")[0]
    goes = ", ".join(f"{k.replace('_', ' ')} {', '.join(v)}" for k, v in info.registered.items()) or "nothing registered"
    agents = [reg.scaffolds[n].value for n in info.registered.get("scaffolds", []) if reg.scaffolds[n].value.kind == "black"]
    console.print(f"uninstalling the plugin {dist} (it registered: {goes})"
                  + (f" and removing its agents' installs ({', '.join(a.name for a in agents)})" if agents else ""),
                  soft_wrap=True)  # one line, also when piped
    with console.status(f"uninstalling {dist}") as status:
        installer.pip_uninstall(dist, on_line=lambda line: status.update(f"uninstalling {dist}: {line[:100]}"))
    plugins.reset()
    console.print(f"[green]uninstalled[/] {dist}")
    for spec in agents:
        _remove_agent(spec)


def _describe(name: str) -> dict[str, Any]:
    """One scaffold as a dict, with its options resolved from ``forge.toml``."""
    reg = registry()
    spec = reg.scaffold(name)
    config = get_state().config()
    options = reg.options_for("scaffolds", name, config.scaffolds.get(name, {}), config.origin)
    info: dict[str, Any] = {
        "kind": f"{spec.kind}-box" + (f" ({spec.family} family)" if spec.family else ""),
        "description": spec.description,
        "plugin": reg.scaffolds[name].plugin,
        "api": spec.api,
        "tool_format": spec.tool_format or "the model's own (model.tool_format: native where its template takes tools)",
        "context_policy": spec.context_policy,
        "definition": str(spec.source_file) if spec.source_file else None,
    }
    if spec.kind == "white":
        info["loop"] = _loop_line(spec)
    if spec.install:
        done = installed(spec)
        info["install"] = f"{spec.install.manager}: {spec.install.requirement}"
        info["installed"] = f"{done.version} at {done.prefix}" if done else f"no (would go to {agent_prefix(name)})"
    if spec.launch:
        info["launch"] = {"command": list(spec.launch.command), "env": spec.launch.env, "files": list(spec.launch.files)}
    if spec.options is not None:
        info["options"] = {
            key: (getattr(options, key), field.description or "") for key, field in spec.options.model_fields.items()
        }
    return info


def _first_prompt(name: str, refresh: bool) -> dict[str, Any]:
    """How long the installed agent's first prompt is on the current model (a measurement or the cache's)."""
    from forge_cli.rollout.first_prompt import first_prompt_length  # heavy: the gateway

    try:
        found = first_prompt_length(get_state().config(), name, refresh=refresh)
    except ForgeError as exc:
        return {"tokens": None, "text": f"not measured: {exc}"}
    when = datetime.datetime.fromtimestamp(found.measured_at).strftime("%Y-%m-%d %H:%M")
    of = f" of the model's {found.context:,} positions" + ("" if found.fits else ": it does not fit") if found.context else ""
    text = f"{found.tokens:,} tokens{of} (measured {when}{', cached' if found.cached else ''})"
    return {"tokens": found.tokens, "context": found.context, "cached": found.cached, "model": found.model,
            "measured_at": found.measured_at, "text": text}


def _loop_line(spec: Any) -> str:
    """Whether a white-box scaffold's loop resolves (this imports the loop's module)."""
    label, problem = loop_label(spec), loop_status(spec)
    if problem is None:
        return f"{label} (resolves)"
    return f"{label or 'none'}: {problem}; it cannot run"


def _plugin_named(reg: Any, name: str) -> str | None:
    for plugin in reg.plugins:
        if normalise_name(plugin.split(":")[0]) == normalise_name(name):
            return plugin
    return None


def _progress(label: str) -> Any:
    return Progress(
        SpinnerColumn(), TextColumn("[bold]{task.description}"), TimeElapsedColumn(), TextColumn("[dim]{task.fields[line]}"),
        console=err_console, transient=True,
    )


def _add_agent(spec: Any, force: bool) -> None:
    if not force and (done := installer.installed(spec)) is not None:
        console.print(f"{spec.name} {done.version} is already installed at {done.prefix}")
        return
    with _progress(spec.name) as progress:
        task = progress.add_task(f"installing {spec.install.requirement}", line="")
        result = installer.install_agent(
            spec, force=force, on_line=lambda line: progress.update(task, line=line[-80:])
        )
    console.print(f"[green]installed[/] {spec.name} {result.version} → {result.bin}")


def _add_plugin(target: str, known: list[str]) -> None:
    dist = installer.distribution_name(target)
    with _progress(target) as progress:
        task = progress.add_task(f"pip install {target}", line="")
        try:
            installer.pip_install(target, on_line=lambda line: progress.update(task, line=line[-80:]))
        except ForgeError as exc:
            close = difflib.get_close_matches(target, known, n=1)
            hint = f" (did you mean the scaffold '{close[0]}'?)" if close else ""
            raise ForgeError(f"could not install '{target}'{hint}: {exc}") from None
    plugins.reset()
    reg = registry()
    name = _plugin_named(reg, dist)
    if name is None:
        try:
            has_entry_point = any(ep.group == "forge" for ep in importlib.metadata.distribution(dist).entry_points)
        except importlib.metadata.PackageNotFoundError:
            has_entry_point = False
        if has_entry_point:
            warn(f"installed {dist}; it is a Forge plugin but FORGE_LOAD_PLUGINS does not allow it")
        else:
            warn(f"installed {dist}, but it registers no Forge plugin (no entry point in group 'forge')")
        return
    registered = reg.plugins[name].registered
    console.print(f"[green]installed[/] plugin {name} {reg.plugins[name].version}")
    for kind, names in registered.items():
        console.print(f"  {kind.replace('_', ' ')}: {', '.join(names)}")
    if not registered:
        warn(f"plugin {name} loaded but registered nothing")
