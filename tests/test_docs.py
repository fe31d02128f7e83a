"""The documentation keeps up with the code: every built-in command and each of its options is in
docs/cli.md, every page under docs/ is linked from the README, every relative link (and its #anchor)
in the README and docs/ resolves, and the README's test command is the one CI (`.ci/run`) runs."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import typer

from forge_cli.cli import COMMAND_MODULES

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _builtin_commands() -> list[tuple[str, object]]:
    """(path, click command) of every built-in leaf command; plugins' commands are theirs to document."""
    app = typer.Typer()
    for name in COMMAND_MODULES:
        importlib.import_module(f"forge_cli.commands.{name}").register(app)
    found = []

    def walk(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        else:
            found.append((" ".join(path), command))

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _builtin_commands()


def test_the_walk_finds_the_commands():
    names = {path for path, _ in COMMANDS}
    assert {"train", "rollout", "model warmstart", "gateway serve", "pool export", "sandbox clean"} <= names
    assert len(names) >= 20


@pytest.mark.parametrize("path,command", COMMANDS, ids=[path for path, _ in COMMANDS])
def test_every_command_and_option_is_in_the_cli_reference(path, command):
    rows = [line for line in (DOCS / "cli.md").read_text().splitlines()
            if line.startswith("| ") and re.search(rf"`forge {re.escape(path)}[ `]", line)]
    assert rows, f"docs/cli.md has no table row for `forge {path}`"
    row = " ".join(rows)
    description = row.split(" | ")[-1]
    assert len(description.split()) >= 3, f"docs/cli.md says too little about `forge {path}`"
    options = [o for p in command.params if p.param_type_name == "option" and not getattr(p, "hidden", False)
               for o in [*p.opts, *p.secondary_opts] if o.startswith("--") and o != "--help"]
    missing = [o for o in options if not re.search(rf"{re.escape(o)}(?![\w-])", row)]
    assert not missing, f"docs/cli.md's row for `forge {path}` does not document {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_resolves(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{page.name}: the link {target} names no file"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: {dest.name} has no heading for #{anchor}"


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for page in DOCS.glob("*.md"):
        assert f"](docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"


def test_the_readme_keeps_the_test_command_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert "```bash\nmake test\n```" in readme, "README.md lost its test command, `make test`"
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^[^#\n]*\bmake test$", ci, re.M), ".ci/run no longer runs `make test`"
