"""A plugin's black-box agent: the options every agent gets, where a bad option came from, MCP declared in its
launch, scripts shipped into its install folder, `forge scaffold remove`, and docs/plugins.md's walkthrough
("Adding a black-box agent") followed literally: its files, installed, added and run on tasks."""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from forge_cli import installer, plugins
from forge_cli.errors import ForgeError
from forge_cli.specs import MCP_SERVER_NAMES, AgentOptions, InstallRecipe, LaunchSpec, McpLaunch, ScaffoldSpec

ROOT = Path(__file__).resolve().parent.parent

PLUGIN = '''
from pydantic import BaseModel
from forge_cli import hookimpl
from forge_cli.specs import InstallRecipe, LaunchSpec, McpLaunch, ScaffoldSpec

class Knobs(BaseModel):
    persona: str = "terse"

@hookimpl
def register_scaffolds(register):
    register(ScaffoldSpec(name="plain-agent", kind="black", description="an agent with no options of its own",
                          install=InstallRecipe("pip", "plain", ">=1", "plain"), launch=LaunchSpec(("$bin", "$prompt"))))
    register(ScaffoldSpec(name="knob-agent", kind="black", description="an agent with options of its own",
                          install=InstallRecipe("pip", "knob", ">=1", "knob"), launch=LaunchSpec(("$bin",)), options=Knobs))
    register(ScaffoldSpec(name="mcp-agent", kind="black", description="an agent that reads an mcpServers file",
                          install=InstallRecipe("npm", "mcp-agent", "^1", "mcp-agent"),
                          launch=LaunchSpec(("$bin", "-p", "$prompt"), files={".mcp.json": '{"mcpServers": {"mine": {}}, "x": 1}'},
                                            mcp=McpLaunch(args=("--mcp-config", "$mcp_config", "--in", "$workdir")))))
'''


@pytest.fixture
def agent_plugin(fake_dist):
    fake_dist("agent-plugin", {"agent_plugin_mod": PLUGIN}, {"agents": "agent_plugin_mod"})
    return plugins.get_registry()


# ---- 1. the options every black-box agent gets ----------------------------------------------------------


def test_every_black_box_scaffold_gets_the_agent_options_whoever_registers_it(agent_plugin, tmp_path):
    registry = agent_plugin
    assert registry.warnings == []
    plain = registry.options_for("scaffolds", "plain-agent", {"timeout_s": 30, "extra_args": ["-v"], "env": {"A": "1"},
                                                               "sandbox": "docker"}, "forge.toml")
    assert (plain.timeout_s, plain.extra_args, plain.env, plain.sandbox, plain.mcp) == (30.0, ["-v"], {"A": "1"}, "docker", [])
    knob = registry.options_for("scaffolds", "knob-agent", {"persona": "chatty", "timeout_s": 5}, "forge.toml")
    assert (knob.persona, knob.timeout_s) == ("chatty", 5.0)  # its own model, extended
    with pytest.raises(ForgeError, match=r"timeout_s: Input should be greater than 0"):
        registry.options_for("scaffolds", "knob-agent", {"timeout_s": 0}, "forge.toml")
    # a definition file gets them too
    definition = tmp_path / "a.toml"
    definition.write_text('name = "t"\nkind = "black"\ndescription = "d"\n[install]\nmanager = "pip"\npackage = "p"\n'
                          'version = ""\nbin = "python"\n[launch]\ncommand = ["$bin"]\n')
    spec = ScaffoldSpec.from_toml(definition)
    assert issubclass(spec.options, AgentOptions) and spec.options().timeout_s == 900.0
    # white-box scaffolds do not
    assert ScaffoldSpec(name="w", kind="white", family="tool-loop", description="d").options is None


def test_the_mcp_option_names_forges_servers_and_is_refused_for_an_agent_that_declares_none(agent_plugin):
    from forge_cli.rollout.mcp_tools import SERVERS

    assert tuple(SERVERS) == MCP_SERVER_NAMES  # the contract's names are the servers Forge ships
    registry = agent_plugin
    assert registry.options_for("scaffolds", "mcp-agent", {"mcp": ["files"]}, "forge.toml").mcp == ["files"]
    with pytest.raises(ForgeError, match=r"\[scaffolds.plain-agent\]: mcp: .*the agent 'plain-agent' cannot use MCP servers"):
        registry.options_for("scaffolds", "plain-agent", {"mcp": ["files"]}, "forge.toml")
    with pytest.raises(ForgeError, match="mcp.0: Input should be 'shell', 'files' or 'search'"):
        registry.options_for("scaffolds", "mcp-agent", {"mcp": ["nope"]}, "forge.toml")


# ---- 2. a bad option is blamed on the layer that set it ----------------------------------------------------


def test_a_bad_agent_option_names_where_it_came_from(cli, tmp_path):
    set_flag = cli("--set", "scaffolds.opencode.timeout_s=-1", "config", "show")
    assert set_flag.exit_code == 1
    assert "command-line flag --set scaffolds.opencode.timeout_s [scaffolds.opencode]: timeout_s:" in set_flag.stderr
    assert "forge.toml" not in set_flag.stderr
    env = cli("config", "show", env={"FORGE_SCAFFOLDS__OPENCODE__TIMEOUT_S": "-1"})
    assert "environment variable FORGE_SCAFFOLDS__OPENCODE__TIMEOUT_S [scaffolds.opencode]" in env.stderr
    (tmp_path / "forge.toml").write_text("[scaffolds.opencode]\ntimeout_s = -1\n")
    file = cli("scaffold", "show", "opencode", "--no-measure")
    assert f"{tmp_path / 'forge.toml'} [scaffolds.opencode]: timeout_s:" in file.stderr
    # the file sets the section, the flag the bad key: the flag is blamed
    (tmp_path / "forge.toml").write_text("[scaffolds.opencode]\ntimeout_s = 10\n")
    flag_over_file = cli("--set", "scaffolds.opencode.extra_args=3", "scaffold", "show", "opencode", "--no-measure")
    assert "command-line flag --set scaffolds.opencode.extra_args" in flag_over_file.stderr
    unknown = cli("--set", "scaffolds.nope.x=1", "config", "show")
    assert unknown.stderr.startswith("Error: command-line flag --set scaffolds.nope.x: [scaffolds.nope]: no scaffold named")


# ---- 3. MCP for any agent that declares how it takes the servers ---------------------------------------------


def test_a_declared_mcp_servers_file_is_merged_and_its_args_name_it(agent_plugin, tmp_path):
    from forge_cli.rollout.agent_mcp import Launch, configure

    spec = agent_plugin.scaffold("mcp-agent")
    servers = {"files": ["/py", "/t/files_server.py", "--root", str(tmp_path)]}
    values = {"bin": "/b", "workdir": str(tmp_path), "prompt": "p"}
    command, env, files = spec.launch.render({**values, "scaffolds": "", "agent_dir": "", "base_url": "", "gateway_url": "",
                                              "api_key": "", "model": ""})
    done = configure(spec, Launch(command, env, files), servers, tmp_path, values)
    assert done.command == ["/b", "-p", "p", "--mcp-config", str(tmp_path / ".mcp.json"), "--in", str(tmp_path)]
    written = json.loads(done.files[".mcp.json"])
    assert written["x"] == 1 and written["mcpServers"]["mine"] == {}  # the recipe's own file, kept
    assert written["mcpServers"]["files"] == {"type": "stdio", "command": "/py", "args": servers["files"][1:]}
    assert configure(spec, Launch(command, env, files), {}, tmp_path, values) == Launch(command, env, files)
    with pytest.raises(ForgeError, match="the agent 'plain-agent' cannot use MCP servers"):
        configure(agent_plugin.scaffold("plain-agent"), Launch([], {}, {}), servers, tmp_path, values)


def test_mcp_config_is_a_placeholder_of_the_mcp_args_only():
    install = InstallRecipe("npm", "a", "^1", "a")
    outside = ScaffoldSpec(name="a", kind="black", description="d", install=install,
                           launch=LaunchSpec(("$bin", "$mcp_config"), mcp=McpLaunch()))
    with pytest.raises(ForgeError, match=r"command\[1\]: \$mcp_config .*\$mcp_config in launch.mcp.args only"):
        outside.validate()
    for mcp, needle in ((McpLaunch(args=("$nope",)), r"mcp.args\[0\]: \$nope"),
                        (McpLaunch(file="/etc/x.json"), "mcp.file: '/etc/x.json' is not a plain path")):
        with pytest.raises(ForgeError, match=needle):
            ScaffoldSpec(name="a", kind="black", description="d", install=install,
                         launch=LaunchSpec(("$bin",), mcp=mcp)).validate()


def test_a_toml_definition_declares_mcp_and_scripts(tmp_path):
    (tmp_path / "run.py").write_text("print('hi')\n")
    definition = tmp_path / "a.toml"
    definition.write_text('name = "a"\nkind = "black"\ndescription = "d"\n'
                          '[install]\nmanager = "pip"\npackage = "p"\nversion = ""\nbin = "python"\nscripts = ["run.py"]\n'
                          '[launch]\ncommand = ["$bin", "$agent_dir/run.py"]\n'
                          '[launch.mcp]\nfile = "servers.json"\nargs = ["--mcp", "$mcp_config"]\n')
    spec = ScaffoldSpec.from_toml(definition)
    assert spec.launch.mcp == McpLaunch(file="servers.json", args=("--mcp", "$mcp_config"))
    assert spec.install.scripts == (str(tmp_path / "run.py"),)
    assert spec.options(mcp=["shell"]).mcp == ["shell"]  # it declares MCP: the option is taken
    (tmp_path / "run.py").unlink()
    with pytest.raises(ForgeError, match=r"install.scripts: .*run.py is not a file"):
        ScaffoldSpec.from_toml(definition)


# ---- 4. scripts a plugin ships, copied into the agent's install folder --------------------------------------------


def test_scripts_are_copied_into_the_install_folder_and_an_edit_is_a_new_install(tmp_path):
    script = tmp_path / "runner.py"
    script.write_text("print(1)\n")
    script.chmod(0o755)
    recipe = InstallRecipe("pip", "p", "", "python", scripts=(str(script),))
    key = installer._requirement_key(recipe)
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    installer.copy_scripts(recipe, prefix)
    assert (prefix / "runner.py").read_text() == "print(1)\n" and (prefix / "runner.py").stat().st_mode & 0o111
    script.write_text("print(2)\n")
    assert installer._requirement_key(recipe) != key
    assert InstallRecipe("pip", "p", "", "python", scripts=("runner.py",)).bad_scripts() == ["'runner.py' is not an absolute path"]


def test_agent_dir_is_the_install_folder_in_the_launch(tmp_path):
    from forge_cli.installer import AgentInstall
    from forge_cli.rollout.blackbox import launch_values

    spec = ScaffoldSpec(name="a", kind="black", description="d", install=InstallRecipe("pip", "p", "", "python"),
                        launch=LaunchSpec(("$bin", "$agent_dir/run.py")))
    spec.validate()
    install = AgentInstall("a", tmp_path / "a", "r", "1", tmp_path / "a" / "venv" / "bin" / "python", 0)
    values = launch_values(spec, install, base_url="http://x/v1", api_key="k", model="m", prompt="p", workdir=tmp_path)
    assert spec.launch.render(values)[0] == [str(install.bin), f"{tmp_path / 'a'}/run.py"]


# ---- 5. forge scaffold remove: the agent's install, or the plugin ----------------------------------------------


def test_remove_takes_the_agents_install_alone_and_the_plugin_only_when_asked(agent_plugin, cli, monkeypatch):
    from tests.test_blackbox import fake_install

    uninstalled = []
    monkeypatch.setattr(installer, "pip_uninstall", lambda dist, on_line=None: uninstalled.append(dist))
    spec = agent_plugin.scaffold("plain-agent")
    fake_install(spec)
    removed = cli("scaffold", "remove", "plain-agent")
    assert removed.exit_code == 0 and uninstalled == []
    assert "removed the install of plain-agent at" in removed.stdout and "--plugin" in removed.stdout
    assert not installer.agent_prefix("plain-agent").exists()
    fake_install(spec)
    gone = cli("scaffold", "remove", "plain-agent", "--plugin")
    assert gone.exit_code == 0 and uninstalled == ["agent-plugin"]
    assert "uninstalling the plugin agent-plugin (it registered: scaffolds plain-agent, knob-agent, mcp-agent)" in \
        " ".join(gone.stdout.split())
    assert not installer.agent_prefix("plain-agent").exists()
    builtin = cli("scaffold", "remove", "opencode", "--plugin")
    assert builtin.exit_code == 1 and "built into Forge" in builtin.stderr


# ---- 6. the walkthrough, followed literally ----------------------------------------------------------------------


def walkthrough_files() -> dict[str, str]:
    """Every file the walkthrough of docs/plugins.md gives (a bold `PATH` line, then its fenced block)."""
    text = (ROOT / "docs" / "plugins.md").read_text()
    section = text[text.index("## Adding a black-box agent"):text.index("## Hooks")]
    return dict(re.findall(r"^\*\*`([\w./-]+)`\*\*.*?\n```\w*\n(.*?)^```", section, re.S | re.M))


def test_the_walkthrough_gives_every_file_of_its_tree():
    files = walkthrough_files()
    assert set(files) == {"pyproject.toml", "forge_agent_tiny/__init__.py", "forge_agent_tiny/tiny.toml",
                          "forge_agent_tiny/tiny_agent.py"}
    assert tomllib.loads(files["pyproject.toml"])["project"]["entry-points"]["forge"] == {"tiny": "forge_agent_tiny"}


@pytest.mark.slow
def test_the_walkthroughs_agent_is_added_and_solves_files_tasks(fake_dist, cli, tiny_model, tmp_path):
    """The plugin exactly as docs/plugins.md writes it (registered through a dist-info, as pip would), its agent
    added by `forge scaffold add` (a venv of its own; nothing downloaded) and run by `forge rollout` on two files
    tasks with the scripted files_shell policy in the local sandbox: both solved."""
    files = walkthrough_files()
    project = tomllib.loads(files.pop("pyproject.toml"))["project"]
    site = fake_dist(project["name"], {}, project["entry-points"]["forge"], version=project["version"])
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    sys.modules.pop("forge_agent_tiny", None)
    added = cli("scaffold", "add", "tiny")
    assert added.exit_code == 0, added.stderr
    assert (installer.agent_prefix("tiny") / "tiny_agent.py").is_file()
    done = cli("--set", "gateway.port=0", "rollout", "--scaffold", "tiny", "--task", "files", "--groups", "1", "--n", "2",
               "--engine", "scripted", "--policy", "forge_cli.tasks.demo_policies:files_shell", "--model", str(tiny_model),
               "--sandbox", "local", "--run", "tiny-run")
    assert done.exit_code == 0, done.stderr
    assert "100.0%" in done.stdout, done.stdout
    stats = json.loads(cli("pool", "stats", "tiny-run", "--json").stdout)
    assert stats["trajectories"]["completed"] == 2
    removed = cli("scaffold", "remove", "tiny")
    assert removed.exit_code == 0 and not installer.agent_prefix("tiny").exists()


def test_a_plugins_own_options_model_is_kept_in_the_extended_one(agent_plugin):
    options = agent_plugin.scaffold("knob-agent").options
    assert issubclass(options, AgentOptions) and issubclass(options, BaseModel)
    assert options.__name__ == "Knobs" and set(options.model_fields) >= {"persona", "timeout_s", "mcp"}
