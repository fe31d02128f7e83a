"""``forge sandbox build|status|clean``: the docker sandbox's offline images and its containers."""

from __future__ import annotations

import typer
from rich.table import Table

from forge_cli.commands._common import print_json
from forge_cli.console import console, err_console
from forge_cli.sandbox.docker import clean_leftovers
from forge_cli.sandbox.images import build_images, engine_status


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Build the docker sandbox's images offline; see and clean its containers.", no_args_is_help=True)
    app.add_typer(group, name="sandbox")

    @group.command("build")
    def build(
        force: bool = typer.Option(False, "--force", help="Rebuild even what is there (the rootfs cache too)."),
        base_only: bool = typer.Option(False, "--base-only", help="Only the base image (debootstrap + docker import)."),
    ) -> None:
        """The base image (debootstrap --variant=minbase of Debian + docker import; the rootfs is cached under
        FORGE_HOME/cache/sandbox) and every image under sandboxes/images, FROM it. No registry is used."""
        with err_console.status("building the sandbox images…") as status:
            def progress(message: str) -> None:
                status.update(message)
                err_console.print(f"[dim]{message}[/]", highlight=False)

            done = build_images(force=force, only_base=base_only, progress=progress)
        for image in done:
            what = f"built in {image.seconds:.0f} s" if image.built else "already there"
            console.print(f"[green]{image.tag}[/] {what}", highlight=False)

    @group.command("status")
    def status(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables.")) -> None:
        """The Docker engine Forge uses, its sandbox images and the sandbox containers it holds."""
        info = engine_status()
        if as_json:
            print_json(info)
            return
        console.print(f"Docker engine {info['version']} at {info['host']}", highlight=False)
        images = Table(title="images", title_justify="left")
        for column in ("image", "id", "size"):
            images.add_column(column)
        for tag, image in info["images"].items():
            images.add_row(tag, *(("[dim]not built[/]", "") if image is None else (image["id"], f"{image['size_mb']} MiB")))
        console.print(images)
        if info["containers"]:
            containers = Table(title="sandbox containers", title_justify="left")
            for column in ("name", "status", "run", "owner"):
                containers.add_column(column)
            for c in info["containers"]:
                containers.add_row(c["name"], c["status"], c["run"], "alive" if c["owner_alive"] else "[red]gone[/]")
            console.print(containers)
        else:
            console.print("no sandbox containers")

    @group.command("clean")
    def clean() -> None:
        """Remove the sandbox containers whose process is gone (those of killed runs)."""
        removed = clean_leftovers()
        console.print(f"removed {len(removed)} leftover container(s)" + (f": {', '.join(removed)}" if removed else ""))
