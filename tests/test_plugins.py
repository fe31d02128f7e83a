"""Plugin loading: good, broken and invalid plugins, the allow-list, and every hook tested and documented."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from forge_cli import hookspecs, plugins

GOOD = '''
from typing import Any
from forge_cli import hookimpl
from forge_cli.specs import (
    InstallRecipe, LaunchSpec, ParsedOutput, ReasoningParser, RewardSpec, SandboxSpec, ScaffoldSpec, ToolFormat,
)
from forge_cli.tasks.types import Outcome, Task, TaskSuite

class Upper(ToolFormat):
    name = "upper"
    description = "CALL NAME ARGS"
    def render_tools(self, tools): return "tools: " + ",".join(t["function"]["name"] for t in tools)
    def format_calls(self, calls): return "\\n".join(f"CALL {c.name}" for c in calls)
    def parse(self, text): return ParsedOutput(content=text, calls=[])

@hookimpl
def register_scaffolds(register):
    register(ScaffoldSpec(name="good-loop", kind="white", family="tool-loop", description="a loop"))
    register(ScaffoldSpec(
        name="good-agent", kind="black", description="an agent",
        install=InstallRecipe(manager="pip", package="good-agent", version=">=1", bin="good"),
        launch=LaunchSpec(command=("$bin", "$prompt")),
    ))

class Hash(ReasoningParser):
    name = "hash"
    description = "thinking after # up to the first blank line"
    def split(self, text):
        head, sep, rest = text.partition("\\n\\n")
        return (head[1:], rest) if text.startswith("#") and sep else ("", text)

@hookimpl
def register_tool_formats(register):
    register(Upper())

@hookimpl
def register_reasoning_parsers(register):
    register(Hash())

@hookimpl
def register_sandboxes(register):
    register(SandboxSpec(name="good-box", description="a box", check=lambda: None))

class Solved:
    def verify(self, task, workdir, transcript):
        return Outcome(1.0, "always")

@hookimpl
def register_tasks(register):
    register(TaskSuite(name="good-tasks", description="n tasks", verifier=Solved(),
                       make=lambda split, n, seed: [Task(id=f"t{i}", suite="good-tasks", prompt=f"{i}+{i}", split=split)
                                                    for i in range(1, n + 1)]))

@hookimpl
def register_rewards(register):
    register(RewardSpec(name="good-reward", description="length", compute=lambda trajectory, **_: float(len(trajectory))))

@hookimpl
def register_commands(app):
    @app.command("good-hello")
    def hello(name: str = "world"):
        """Say hello (from a plugin)."""
        print(f"hello {name} from good-plugin")
'''

BROKEN_IMPORT = "raise ImportError('needs a package that is not installed')\n"

BAD_REGISTRATIONS = '''
from forge_cli import hookimpl
from forge_cli.specs import InstallRecipe, LaunchSpec, ScaffoldSpec, SandboxSpec

@hookimpl
def register_scaffolds(register):
    register("not a spec")
    register(ScaffoldSpec(name="typo-agent", kind="black", description="a launch with typos",
                          install=InstallRecipe("npm", "typo-agent", "1.0.0", "typo"),
                          launch=LaunchSpec(command=("$bin", "--url", "$gateway_ur", "--model", "${modle}"),
                                            env={"KEY": "$api_key", "PY": "$python", "PRICE": "5$"})))
    register(ScaffoldSpec(name="Bad Name", kind="white", family="x", description="d"))
    register(ScaffoldSpec(name="no-install", kind="black", description="black without a recipe"))
    register(ScaffoldSpec(name="typo-api", kind="black", api="opnai-chat", description="an API misspelt",
                          install=InstallRecipe("npm", "typo-api", "1.0.0", "t"), launch=LaunchSpec(command=("$bin",))))
    register(ScaffoldSpec(name="react", kind="white", family="tool-loop", description="a duplicate"))
    register(ScaffoldSpec(name="bad-ok", kind="white", family="tool-loop", description="this one is fine"))

@hookimpl
def register_sandboxes(register):
    raise RuntimeError("sandbox hook exploded")

@hookimpl
def register_tasks(register):
    pass

@hookimpl
def register_widgets(register):
    pass
'''


@pytest.fixture
def good(fake_dist):
    return fake_dist("good-plugin", {"good_plugin_mod": GOOD}, {"good": "good_plugin_mod"}, version="1.2.3")


def _loaded():
    plugins.reset()
    return plugins.get_registry()


# ---- one test per hook ----------------------------------------------------------------------------


def test_hook_register_scaffolds(good):
    reg = _loaded()
    assert reg.scaffolds["good-loop"].plugin == "good-plugin"
    assert reg.scaffold("good-agent").install.requirement == "good-agent>=1"
    assert reg.plugins["good-plugin"].version == "1.2.3"
    assert reg.plugins["good-plugin"].registered["scaffolds"] == ["good-loop", "good-agent"]
    assert not reg.warnings


def test_hook_register_tool_formats(good):
    reg = _loaded()
    fmt = reg.tool_format("upper")
    assert fmt.render_tools([{"type": "function", "function": {"name": "ls"}}]) == "tools: ls"
    assert reg.tool_formats["hermes"].plugin == "forge:tool-formats"


def test_hook_register_reasoning_parsers(good):
    reg = _loaded()
    entry = reg.reasoning_parsers["hash"]
    assert entry.plugin == "good-plugin" and entry.value.split("#plan\n\nanswer") == ("plan", "answer")
    assert reg.reasoning_parsers["qwen3"].plugin == "forge:vllm-parsers" and len(reg.reasoning_parsers) == 39


def test_hook_register_sandboxes(good):
    reg = _loaded()
    assert reg.sandboxes["good-box"].value.check() is None
    assert {"local", "docker", "good-box"} <= set(reg.sandboxes)


def test_hook_register_tasks(good):
    reg = _loaded()
    suite = reg.tasks["good-tasks"].value
    assert [t.id for t in suite.make("train", 2, 0)] == ["t1", "t2"]
    assert reg.tasks["good-tasks"].plugin == "good-plugin" and reg.tasks["calc"].plugin == "forge:tasks"


def test_hook_register_rewards(good):
    reg = _loaded()
    assert reg.rewards["good-reward"].value.compute([1, 2, 3]) == 3.0


def test_hook_register_commands(good, cli):
    result = cli("good-hello", "--name", "forge")
    assert result.exit_code == 0
    assert "hello forge from good-plugin" in result.stdout
    assert "good-hello" in cli("--help").stdout


HOOK_TESTS = {
    "register_scaffolds": test_hook_register_scaffolds,
    "register_tool_formats": test_hook_register_tool_formats,
    "register_reasoning_parsers": test_hook_register_reasoning_parsers,
    "register_sandboxes": test_hook_register_sandboxes,
    "register_tasks": test_hook_register_tasks,
    "register_rewards": test_hook_register_rewards,
    "register_commands": test_hook_register_commands,
}

HOOKS = sorted(name for name, fn in vars(hookspecs).items() if hasattr(fn, "forge_spec"))


def test_every_hook_has_a_test():
    assert HOOKS, "no hookspecs found"
    assert sorted(HOOK_TESTS) == HOOKS


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_documented(hook):
    docs = (Path(__file__).resolve().parent.parent / "docs" / "plugins.md").read_text()
    section = re.search(rf"^### `{hook}\((\w+)\)`\n(.+?)(?=^##)", docs, re.S | re.M)
    assert section, f"docs/plugins.md has no '### `{hook}(...)`' section"
    params = list(inspect.signature(getattr(hookspecs, hook)).parameters)
    assert section.group(1) == params[0], f"docs name {hook}'s argument '{section.group(1)}', the hookspec '{params[0]}'"
    assert len(section.group(2).split()) > 25, f"the section on {hook} is too thin to be documentation"
    assert getattr(hookspecs, hook).__doc__, f"hookspec {hook} has no docstring"


# ---- failure isolation ------------------------------------------------------------------------------


def test_broken_import_is_one_warning_and_cli_works(fake_dist, good, cli):
    fake_dist("broken-plugin", {"broken_plugin_mod": BROKEN_IMPORT}, {"broken": "broken_plugin_mod"})
    result = cli("scaffold", "list", "--json")
    assert result.exit_code == 0
    names = {row["name"] for row in json.loads(result.stdout)}
    assert {"react", "good-loop"} <= names
    warnings = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 1
    assert "plugin 'broken-plugin' failed to load" in warnings[0] and "needs a package that is not installed" in warnings[0]


def test_invalid_registrations_are_rejected_with_warnings(fake_dist):
    fake_dist("bad-plugin", {"bad_plugin_mod": BAD_REGISTRATIONS}, {"bad": "bad_plugin_mod"})
    reg = _loaded()
    text = "\n".join(reg.warnings)
    assert "plugin 'bad-plugin': register_scaffolds got str, expected ScaffoldSpec" in text
    assert "scaffold name 'Bad Name' is not valid" in text
    assert "scaffold 'no-install': a black-box scaffold needs an install recipe" in text
    assert ("scaffold 'typo-api': api must be one of openai-chat, openai-responses, anthropic-messages, gemini, ollama, "
            "not 'opnai-chat'") in text
    assert "scaffold 'react' is already registered by plugin 'forge:scaffolds'" in text
    assert "register_sandboxes raised RuntimeError: sandbox hook exploded" in text
    assert "implements unknown hook 'register_widgets'" in text
    # every bad placeholder of a launch recipe, named at registration (not at every trajectory)
    assert ("scaffold 'typo-agent': its launch recipe has 4 bad placeholders: command[2]: $gateway_ur; command[4]: $modle; "
            "env.PY: $python; env.PRICE: a '$' that starts no placeholder") in text
    assert "typo-agent" not in reg.scaffolds
    assert len(reg.warnings) == 8
    # what was valid still registered, and the built-in 'react' is untouched
    assert reg.scaffolds["bad-ok"].plugin == "bad-plugin"
    assert reg.scaffolds["react"].plugin == "forge:scaffolds"
    assert {"local", "docker"} <= set(reg.sandboxes)


def test_allow_list(fake_dist, good, monkeypatch):
    fake_dist("other-plugin", {"other_plugin_mod": BROKEN_IMPORT}, {"other": "other_plugin_mod"})
    monkeypatch.setenv("FORGE_LOAD_PLUGINS", "")
    reg = _loaded()
    assert all(info.builtin for info in reg.plugins.values())
    assert "good-loop" not in reg.scaffolds and "react" in reg.scaffolds
    assert not reg.warnings
    monkeypatch.setenv("FORGE_LOAD_PLUGINS", "good-plugin")
    reg = _loaded()
    assert "good-plugin" in reg.plugins and "other-plugin" not in reg.plugins
    assert not reg.warnings  # the broken one was never imported
    monkeypatch.setenv("FORGE_LOAD_PLUGINS", "good_plugin, other-plugin")
    reg = _loaded()
    assert "good-plugin" in reg.plugins and any("other-plugin" in w for w in reg.warnings)


def test_builtins_use_the_same_hooks_as_third_parties():
    reg = _loaded()
    for name, module in plugins.BUILTIN_PLUGINS.items():
        info = reg.plugins[name]
        assert info.builtin and info.module == module
        assert info.hooks and all(h in HOOKS for h in info.hooks)


# ---- hooks called as pluggy means them -------------------------------------------------------------


def _module(name: str, source: str):
    import types

    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def _collected(*extra):
    pm, reg = plugins.load_plugins(extra=extra)
    return plugins.collect(pm, reg)


def test_an_implementation_gets_only_the_arguments_it_declares(monkeypatch):
    """The hookspec gains an argument; a plugin written before that keeps working, a newer one gets it."""
    extended = _module("extended_hookspecs", '''
from forge_cli.hookspecs import *  # every hookspec as it is ...
from forge_cli.hookspecs import hookspec

@hookspec
def register_scaffolds(register, forge_version):
    """... but register_scaffolds has gained an argument."""
''')
    assert list(inspect.signature(extended.register_scaffolds).parameters) == ["register", "forge_version"]
    monkeypatch.setattr(plugins, "hookspecs", extended)
    old = _module("old_plugin", '''
from forge_cli import hookimpl
from forge_cli.specs import ScaffoldSpec
@hookimpl
def register_scaffolds(register):
    register(ScaffoldSpec(name="old-loop", kind="white", family="f", description="written before forge_version"))
''')
    new = _module("new_plugin", '''
from forge_cli import hookimpl
from forge_cli.specs import ScaffoldSpec
@hookimpl
def register_scaffolds(forge_version, register):
    register(ScaffoldSpec(name="new-loop", kind="white", family="f", description="for forge " + forge_version))
''')
    bare = _module("bare_plugin", '''
from forge_cli import hookimpl
CALLED = []
@hookimpl
def register_tasks():
    CALLED.append(True)
''')
    pm, reg = plugins.load_plugins(extra=[("old", old), ("new", new), ("bare", bare)])
    plugins.collect(pm, reg, forge_version="9.9")
    assert reg.warnings == []
    assert reg.scaffolds["old-loop"].plugin == "old"
    assert reg.scaffolds["new-loop"].value.description == "for forge 9.9"
    assert bare.CALLED == [True]  # declared no argument at all: called with none


def test_a_command_hook_that_takes_no_app_is_called():
    import typer

    bare = _module("bare_commands", '''
from forge_cli import hookimpl
CALLED = []
@hookimpl
def register_commands():
    CALLED.append(True)
''')
    pm, reg = plugins.load_plugins(extra=[("bare", bare)])
    plugins.add_commands(pm, reg, typer.Typer())
    assert bare.CALLED == [True]
    assert reg.warnings == []


@pytest.mark.parametrize("style", ["wrapper", "hookwrapper"])
def test_wrapper_implementations_are_refused_with_one_warning(style):
    wrapping = _module("wrapping_plugin", f'''
from forge_cli import hookimpl
from forge_cli.specs import ScaffoldSpec
RAN = []
@hookimpl({style}=True)
def register_scaffolds(register):
    RAN.append("before")
    register(ScaffoldSpec(name="wrapped-loop", kind="white", family="f", description="from a wrapper"))
    yield
    RAN.append("after")

@hookimpl
def register_sandboxes(register):
    from forge_cli.specs import SandboxSpec
    register(SandboxSpec(name="wrapping-box", description="still registered", check=lambda: None))
''')
    reg = _collected(("wrapping", wrapping))
    assert reg.warnings == [
        f"plugin 'wrapping': its register_scaffolds is a wrapper ({style}=True); Forge calls each plugin's "
        "register_scaffolds on its own, so there is nothing to wrap: refused, not run"
    ]
    assert wrapping.RAN == [] and "wrapped-loop" not in reg.scaffolds
    assert reg.sandboxes["wrapping-box"].plugin == "wrapping"  # the plugin's other hooks still count


def test_on_a_duplicate_the_first_loaded_plugin_wins_whatever_it_asks():
    """Built-ins load first and keep their names, also against a third party that runs last or first."""
    source = '''
from forge_cli import hookimpl
from forge_cli.specs import ScaffoldSpec
@hookimpl({opts})
def register_scaffolds(register):
    register(ScaffoldSpec(name="react", kind="white", family="f", description="{who}'s react"))
    register(ScaffoldSpec(name="shared-loop", kind="white", family="f", description="{who}'s loop"))
'''
    late = _module("late_plugin", source.format(opts="trylast=True", who="late"))
    early = _module("early_plugin", source.format(opts="tryfirst=True", who="early"))
    reg = _collected(("first", late), ("second", early))
    assert reg.scaffolds["react"].plugin == "forge:scaffolds"
    assert reg.scaffolds["shared-loop"].plugin == "first"
    assert reg.scaffolds["shared-loop"].value.description == "late's loop"
    assert reg.warnings == [
        "plugin 'first': scaffold 'react' is already registered by plugin 'forge:scaffolds'; ignored",
        "plugin 'second': scaffold 'react' is already registered by plugin 'forge:scaffolds'; ignored",
        "plugin 'second': scaffold 'shared-loop' is already registered by plugin 'first'; ignored",
    ]
