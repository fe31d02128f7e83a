"""``forge model init|show``: the embedded default policy."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Create and inspect the policy model.", no_args_is_help=True)
    app.add_typer(group, name="model")

    @group.command("init")
    def init(
        path: Optional[Path] = typer.Option(None, "--path", help="Folder to create (default: FORGE_HOME/models/default)."),
        size: str = typer.Option("tiny", "--size", help="tiny (~1.6M parameters) or small (~45M)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the random initialisation."),
        force: bool = typer.Option(False, "--force", help="Overwrite an existing model."),
    ) -> None:
        """Create the default policy: a small Llama, a locally trained BPE tokenizer and a chat template (HF format)."""
        from forge_cli.console import console, err_console
        from forge_cli.engine.default_model import SIZES, default_model_dir, init_default_model
        from forge_cli.errors import ForgeError

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
        import json

        from forge_cli.cli import get_state
        from forge_cli.console import console
        from forge_cli.engine.default_model import resolve_model_path

        folder = resolve_model_path(path or get_state().config().model.path)
        config = json.loads((folder / "config.json").read_text())
        tok = json.loads((folder / "tokenizer_config.json").read_text()) if (folder / "tokenizer_config.json").exists() else {}
        console.print(f"[bold]{folder}[/]")
        for key in ("architectures", "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "max_position_embeddings"):
            console.print(f"  {key}: {config.get(key)}")
        console.print(f"  chat template: {'yes' if tok.get('chat_template') or (folder / 'chat_template.jinja').exists() else 'no'}")
        console.print(f"  eos: {tok.get('eos_token')}  pad: {tok.get('pad_token')}")
