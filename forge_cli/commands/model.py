"""``forge model init|show``: the embedded default policy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Optional

import typer

from forge_cli.commands._common import config_with, get_state
from forge_cli.console import console, err_console
from forge_cli.engine.default_model import SIZES, default_model_dir, init_default_model, resolve_model_path
from forge_cli.errors import ForgeError


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Create and inspect the policy model.", no_args_is_help=True)
    app.add_typer(group, name="model")

    @group.command("init")
    def init(
        path: Optional[Path] = typer.Option(None, "--path", help="Folder to create (default: FORGE_HOME/models/default)."),
        size: str = typer.Option("tiny", "--size", help="tiny (~1.6M parameters), small (~45M), or scoring (1 layer: only scores a scripted policy's text, fast on long prompts)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the random initialisation."),
        force: bool = typer.Option(False, "--force", help="Overwrite an existing model."),
    ) -> None:
        """Create the default policy: a small Llama, a locally trained BPE tokenizer and a chat template (HF format)."""
        if size not in SIZES:
            raise ForgeError(f"unknown model size {size!r}: choose one of {', '.join(SIZES)}")
        target = path or default_model_dir()
        if (target / "config.json").exists() and not force:
            console.print(f"a model already exists at {target} (use --force to overwrite)", soft_wrap=True)
            return
        with err_console.status(f"building the {size} model (tokenizer training, weights)…"):
            out = init_default_model(target, size=size, seed=seed, force=force)
        console.print(f"[green]created[/] {size} model at {out}")

    @group.command("show")
    def show(path: Optional[Path] = typer.Option(None, "--path", help="Model folder (default: model.path or the default model).")) -> None:
        """The model's architecture, size, vocabulary and special tokens."""
        folder = resolve_model_path(path or get_state().config().model.path)
        config = json.loads((folder / "config.json").read_text())
        tok = json.loads((folder / "tokenizer_config.json").read_text()) if (folder / "tokenizer_config.json").exists() else {}
        console.print(f"[bold]{folder}[/]")
        for key in ("architectures", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "max_position_embeddings"):
            console.print(f"  {key}: {config.get(key)}")
        console.print(f"  chat template: {'yes' if tok.get('chat_template') or (folder / 'chat_template.jinja').exists() else 'no'}")
        console.print(f"  eos: {tok.get('eos_token')}  pad: {tok.get('pad_token')}")

    @group.command("warmstart")
    def warmstart(
        out: Optional[Path] = typer.Option(None, "--out", help="Folder for the warm-started model (default: FORGE_HOME/models/default-warm, which forge train starts from)."),
        model: Optional[Path] = typer.Option(None, "--model", help="Model to warm-start (default model.path, else the embedded default)."),
        run: Optional[str] = typer.Option(None, "--run", help="Run folder under run.dir for its traces, evaluations and metrics (default: a timestamp)."),
        target: Optional[float] = typer.Option(None, "--target", help="Stop at this sampled held-out success (default train.warmstart.target_success)."),
        minutes: Optional[float] = typer.Option(None, "--minutes", help="Stop after this long (default train.warmstart.max_minutes)."),
        steps: Optional[int] = typer.Option(None, "--steps", min=1, help="Stop after this many supervised steps (default train.warmstart.max_steps: none)."),
    ) -> None:
        """Supervised warm start on synthetic traces (the demo policies solving train tasks through the
        real gateway and scaffold), stopped on a measured held-out success rate."""
        config = config_with([("model.path", "--model", str(model) if model else None),
                              ("train.warmstart.target_success", "--target", target),
                              ("train.warmstart.max_minutes", "--minutes", minutes),
                              ("train.warmstart.max_steps", "--steps", steps)])

        def on_event(kind: str, event: Any) -> None:  # a warm-start step's record, or a status dict
            if kind == "warmstart" and event.heldout_success is not None:
                err_console.print(f"step {event.step}: loss {event.loss:.3f}, held-out success "
                                  f"{event.heldout_success:.1%}")
            elif kind == "status":
                err_console.print(str(event.get("status")))

        from forge_cli.train.run import warmstart_model  # heavy: the gateway, the trainer

        result, folder = asyncio.run(warmstart_model(config, out=out, run=run, on_event=on_event))
        rate = "—" if result.heldout_success is None else f"{result.heldout_success:.1%}"
        console.print(f"[green]warm-started[/] in {result.steps} steps ({result.seconds:.0f} s, {result.reason}): "
                      f"held-out success {rate}; saved at {folder}")
