"""What plugins register: scaffolds, tool formats, sandboxes, task sets and rewards.

These are plain, torch-free records. A plugin builds them and hands them to the ``register``
callback of a hook (see :mod:`forge_cli.hookspecs`); the host validates them, rejects
duplicates, and records which plugin each came from.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from forge_cli.errors import ForgeError
from forge_cli.names import check_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ScaffoldKind = Literal["white", "black"]
# The wire API a scaffold speaks to the gateway.
AgentApi = Literal["openai-chat", "openai-responses", "anthropic-messages", "gemini", "ollama"]
AGENT_APIS: tuple[str, ...] = get_args(AgentApi)



# ``loop = "package.module:attribute"``
LOOP_REF = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
# ``launch.answer``: where a black-box agent's final answer is read (forge_cli.rollout.blackbox reads it)
ANSWER_RULES = ("stdout", "last-line", "file:NAME", "json:KEY")
# ``context_policy``: each policy's name -> the kind of scaffold that may use it (forge_cli.rollout.context
# holds their code under the same names)
CONTEXT_POLICY_KINDS: dict[str, ScaffoldKind] = {
    "none": "white", "truncate": "white", "discard-tool-output": "white", "summarize": "white", "keep-last-k": "white",
    "agent": "black",
}
# other accepted spellings: the policy is called by its table name everywhere else (events too)
CONTEXT_POLICY_ALIASES: dict[str, str] = {"full": "none"}


def check_loop_ref(ref: object) -> None:
    """Registration-time check of a ``loop`` value: a callable, or ``module:attr`` whose module exists."""
    if callable(ref) and not isinstance(ref, str):
        return
    if not isinstance(ref, str) or not LOOP_REF.match(ref):
        raise ForgeError(f"loop {ref!r} is not a 'package.module:attribute' reference")
    module = ref.partition(":")[0]
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise ForgeError(f"loop {ref!r}: module {module!r} cannot be found ({type(exc).__name__}: {exc})") from None
    if found is None:
        raise ForgeError(f"loop {ref!r}: no module named {module!r}")


_JSON_KEY = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")


def check_answer_rule(scaffold: str, rule: str) -> None:
    """A ForgeError unless ``rule`` is one of :data:`ANSWER_RULES` (``file:`` with a relative name,
    ``json:`` with a key or a dotted path of keys)."""
    if rule in ("stdout", "last-line"):
        return
    if isinstance(rule, str) and rule.startswith("file:"):
        name = rule[len("file:"):]
        if name and not name.startswith("/") and ".." not in Path(name).parts:
            return
    if isinstance(rule, str) and rule.startswith("json:") and _JSON_KEY.fullmatch(rule[len("json:"):]):
        return
    raise ForgeError(
        f"scaffold '{scaffold}': launch.answer {rule!r} is not one of 'stdout', 'last-line', "
        "'file:NAME' (NAME relative to the working folder), 'json:KEY' (the last JSON line of its output that "
        "holds KEY, a key or a dotted path like item.text)"
    )


def context_policy_name(name: str) -> str:
    """The table name of a context policy (``full`` is ``none``); a ForgeError listing the known ones."""
    table = CONTEXT_POLICY_ALIASES.get(name, name)
    if table not in CONTEXT_POLICY_KINDS:
        known = ", ".join([*CONTEXT_POLICY_KINDS, *(f"{a} (= {n})" for a, n in CONTEXT_POLICY_ALIASES.items())])
        raise ForgeError(f"no context policy named {name!r} (known: {known})")
    return table


def check_context_policy(scaffold: str, kind: str, name: str) -> None:
    """A scaffold's policy must be in the table and fit its kind (``agent`` for black-box only)."""
    try:
        table = context_policy_name(name)
    except ForgeError as exc:
        raise ForgeError(f"scaffold '{scaffold}': {exc}") from None
    if CONTEXT_POLICY_KINDS[table] != kind:
        allowed = ", ".join(n for n, k in CONTEXT_POLICY_KINDS.items() if k == kind)
        raise ForgeError(f"scaffold '{scaffold}': context policy {name!r} is not for {kind}-box scaffolds (use {allowed})")


@dataclass(frozen=True)
class InstallRecipe:
    """How ``forge scaffold add`` installs a black-box agent into ``$FORGE_HOME/agents/<name>``.

    ``manager`` is ``npm`` (``npm install --prefix``) or ``pip`` (a venv of its own, so the
    agent's pinned dependencies never touch Forge's). ``version`` is in the manager's own
    syntax (``^1.18.0`` for npm, ``>=2.4,<3`` for pip). ``bin`` is the program to run.
    ``scripts`` are files the scaffold's author ships (a runner script, a config), copied into the
    install folder (``$agent_dir``, which every sandbox sees) at install time: absolute paths, or in a
    TOML definition relative to its folder.
    """

    manager: Literal["npm", "pip"]
    package: str
    version: str
    bin: str
    extra_packages: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()

    @property
    def requirement(self) -> str:
        if self.manager == "npm":
            return f"{self.package}@{self.version}"
        return f"{self.package}{self.version}"

    def bad_scripts(self) -> list[str]:
        """Why each of ``scripts`` cannot be copied (not an absolute path, not a file, a name taken twice)."""
        bad, names = [], set()
        for script in self.scripts:
            path = Path(script)
            if not path.is_absolute():
                bad.append(f"{script!r} is not an absolute path")
            elif not path.is_file():
                bad.append(f"{script} is not a file")
            elif path.name in names:
                bad.append(f"two scripts are named {path.name!r}")
            names.add(path.name)
        return bad


# the placeholders a launch recipe may use (LaunchSpec), each filled by forge_cli.rollout.blackbox.launch_values;
# ``python`` only for pip agents
LAUNCH_PLACEHOLDERS = ("bin", "python", "agent_dir", "scaffolds", "workdir", "base_url", "gateway_url", "api_key", "model",
                       "prompt")
# and in ``launch.mcp.args`` only: the path of the MCP servers file
MCP_PLACEHOLDERS = ("mcp_config",)
# Forge's MCP servers, what a scaffold's ``mcp`` option may name (forge_cli.rollout.mcp_tools.SERVERS serves each)
MCP_SERVER_NAMES = ("shell", "files", "search")


def render_template(text: str, values: dict[str, str]) -> str:
    """``text`` with its ``string.Template`` placeholders filled from ``values``; a ForgeError naming a bad one."""
    try:
        return string.Template(text).substitute(values)
    except (KeyError, ValueError) as exc:
        raise ForgeError(f"launch template {text!r}: unknown or malformed placeholder {exc}") from None


@dataclass(frozen=True)
class McpLaunch:
    """How a black-box agent takes Forge's MCP servers (``[launch.mcp]``): an ``mcpServers`` JSON file
    (``{"mcpServers": {NAME: {"type": "stdio", "command": …, "args": […]}}}``, the format claude-code,
    gemini-cli, qwen-code and cline read) written into the working folder as ``file`` (merged into a
    file of that name the launch already writes), and ``args`` appended to the command, where
    ``$mcp_config`` is the file's absolute path (and every launch placeholder may be used). ``server``:
    more keys each server's entry gets (qwen-code's ``alwaysLoadTools = true``: their tools offered at
    once, not behind its tool search). ``key``: the file's key for the servers, where it is not
    ``mcpServers`` (hermes-agent's ``mcp_servers``; a YAML file is written as JSON, which YAML reads)."""

    file: str = ".mcp.json"
    args: tuple[str, ...] = ()
    server: dict[str, Any] = field(default_factory=dict)
    key: str = "mcpServers"


@dataclass(frozen=True)
class LaunchSpec:
    """How a black-box agent is started and pointed at the gateway.

    Every string may use ``string.Template`` placeholders: ``$bin`` (the installed program),
    ``$python`` (the agent's own venv python, pip agents), ``$agent_dir`` (its install folder, where
    the recipe's ``scripts`` are), ``$scaffolds`` (Forge's scaffolds folder: not inside a
    ``docker`` sandbox), ``$workdir`` (the agent's working folder), ``$base_url``
    (``http://127.0.0.1:PORT/v1``), ``$gateway_url`` (the same without ``/v1``), ``$api_key``
    (the trajectory's key), ``$model`` and ``$prompt`` (the task text); ``$$`` is a dollar sign.
    ``files`` are written into the working folder before launch (config files). ``answer`` says
    where the agent's final answer is once it exits: ``"stdout"`` (the default: the tail of its
    output), ``"last-line"`` (the last non-empty line of its output), ``"file:NAME"`` (a file in
    the working folder) or ``"json:KEY"`` (the last JSON line of its output holding ``KEY``, dotted
    keys for a path); :mod:`forge_cli.rollout.blackbox` reads it. ``mcp`` says how the agent takes
    Forge's MCP servers (:class:`McpLaunch`; None: it takes none, unless Forge knows the agent by name).
    """

    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    answer: str = "stdout"
    mcp: McpLaunch | None = None

    def fields(self) -> list[tuple[str, str]]:
        """(where, text) of every string the recipe renders: ``command[i]``, ``env.KEY``, ``files.NAME``, ``mcp.args[i]``."""
        return ([(f"command[{i}]", c) for i, c in enumerate(self.command)] + [(f"env.{k}", v) for k, v in self.env.items()]
                + [(f"files.{k}", v) for k, v in self.files.items()]
                + [(f"mcp.args[{i}]", a) for i, a in enumerate(self.mcp.args if self.mcp else ())])

    def bad_placeholders(self, allowed: tuple[str, ...] = LAUNCH_PLACEHOLDERS) -> list[str]:
        """Every placeholder of the recipe that is not in ``allowed`` (plus :data:`MCP_PLACEHOLDERS` in
        ``mcp.args``), or malformed (a lone ``$``, ``${x``), with where it is; and an ``mcp.file`` that is
        not a plain path relative to the working folder."""
        bad = []
        if self.mcp is not None and (not self.mcp.file or self.mcp.file.startswith("/") or ".." in Path(self.mcp.file).parts
                                     or "$" in self.mcp.file):
            bad.append(f"mcp.file: {self.mcp.file!r} is not a plain path relative to the working folder")
        for where, text in self.fields():
            here = allowed + MCP_PLACEHOLDERS if where.startswith("mcp.") else allowed
            for match in string.Template.pattern.finditer(text):
                name = match.group("named") or match.group("braced")
                if match.group("invalid") is not None:
                    bad.append(f"{where}: a '$' that starts no placeholder at {text[match.start():match.start() + 12]!r} "
                               "(write $$ for a dollar sign)")
                elif name is not None and name not in here:
                    bad.append(f"{where}: ${name}")
        return bad

    def render(self, values: dict[str, str]) -> tuple[list[str], dict[str, str], dict[str, str]]:
        return (
            [render_template(c, values) for c in self.command],
            {k: render_template(v, values) for k, v in self.env.items()},
            {k: render_template(v, values) for k, v in self.files.items()},
        )


class AgentOptions(BaseModel):
    """Options of every black-box agent (``[scaffolds.NAME]``), whatever plugin registered it."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(900.0, gt=0, description="Wall-clock budget of one run; then it is killed.")
    extra_args: list[str] = Field(default_factory=list, description="Appended to the launch command.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the agent.")
    sandbox: str | None = Field(None, description=(
        "Where this agent runs, a registered sandbox (local, docker); unset: rollout.sandbox. Set here, it wins "
        "over rollout.sandbox and --sandbox: the agent's own section is the more specific."))
    mcp: list[Literal[MCP_SERVER_NAMES]] = Field(  # type: ignore[valid-type]
        default_factory=list, description="Forge's MCP servers (" + ", ".join(MCP_SERVER_NAMES) + ") the agent "
        "starts inside its sandbox (for an agent that takes MCP servers).")


def agent_options(model: type[BaseModel] | None, mcp_refused: str | None = None) -> type[BaseModel]:
    """A black-box agent's options model: ``model`` (its plugin's own, or None) extended with
    :class:`AgentOptions`; ``mcp`` refused with the one line ``mcp_refused`` when the agent takes no MCP servers."""
    base = model or AgentOptions
    bases = (base,) if issubclass(base, AgentOptions) else (base, AgentOptions)
    if bases == (AgentOptions,) and mcp_refused is None:
        return AgentOptions

    def refuse(names: list[str]) -> list[str]:
        if names:
            raise ValueError(mcp_refused)
        return names

    validators = {"no_mcp": field_validator("mcp")(refuse)} if mcp_refused is not None else {}
    extended: type[BaseModel] = create_model(base.__name__, __base__=bases, __doc__=base.__doc__,  # type: ignore[call-overload]
                                             __module__=base.__module__, __validators__=validators)
    return extended


@dataclass(frozen=True)
class ScaffoldSpec:
    """One agent harness Forge can run.

    *White-box*: a Python loop Forge runs itself. ``family`` labels the kind of loop
    (``tool-loop``, …); ``loop`` points at its code, ``"package.module:attr"`` or the object
    itself (the contract is :mod:`forge_cli.rollout.loop`); without a ``loop`` the scaffold is
    listed but cannot run. ``context_policy`` is a name from
    :data:`forge_cli.rollout.context.CONTEXT_POLICIES` (``full``, ``truncate``,
    ``discard-tool-output``, ``summarize``, ``keep-last-k``), ``tool_format`` its default format
    (None: the model's own — ``native`` where its chat template takes tools, ``hermes`` for the
    embedded model; see forge_cli.toolformats.native). *Black-box*: a program Forge installs (``install``) and launches (``launch``) with the
    gateway's URL and key in its environment; its context management is its own
    (``context_policy = "agent"``).

    ``options`` is an optional pydantic model for the scaffold's ``[scaffolds.NAME]`` section in
    ``forge.toml``; the host validates that section against it and hands the loop the result
    (``Episode.options``).
    """

    name: str
    kind: ScaffoldKind
    description: str
    api: AgentApi = "openai-chat"
    tool_format: str | None = None
    context_policy: str = ""  # "": "full" for a white-box scaffold, "agent" for a black-box one
    family: str | None = None
    loop: str | Callable[..., Any] | None = None
    install: InstallRecipe | None = None
    launch: LaunchSpec | None = None
    options: type[BaseModel] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    source_file: Path | None = None

    def __post_init__(self) -> None:
        if not self.context_policy:
            object.__setattr__(self, "context_policy", "agent" if self.kind == "black" else "full")
        own = self.options
        if self.kind == "black" and (own is None or isinstance(own, type) and issubclass(own, BaseModel)
                                     and not issubclass(own, AgentOptions)):
            # every black-box agent takes the agent options, whoever registers it
            refused = None if self.launch is not None and self.launch.mcp is not None else (
                f"the agent '{self.name}' cannot use MCP servers: its launch declares none ([launch.mcp])")
            object.__setattr__(self, "options", agent_options(own, refused))

    def validate(self) -> None:
        check_name("scaffold", self.name)
        if self.kind not in ("white", "black"):
            raise ForgeError(f"scaffold '{self.name}': kind must be 'white' or 'black', not {self.kind!r}")
        if self.api not in AGENT_APIS:
            raise ForgeError(f"scaffold '{self.name}': api must be one of {', '.join(AGENT_APIS)}, not {self.api!r}")
        if not self.description:
            raise ForgeError(f"scaffold '{self.name}': a description is required")
        if self.kind == "white" and not self.family:
            raise ForgeError(f"scaffold '{self.name}': a white-box scaffold names its loop family")
        if self.loop is not None:
            if self.kind == "black":
                raise ForgeError(f"scaffold '{self.name}': a black-box scaffold is launched; it has no loop")
            try:
                check_loop_ref(self.loop)
            except ForgeError as exc:
                raise ForgeError(f"scaffold '{self.name}': {exc}") from None
        check_context_policy(self.name, self.kind, self.context_policy)
        if self.kind == "black" and (self.install is None or self.launch is None):
            raise ForgeError(f"scaffold '{self.name}': a black-box scaffold needs an install recipe and a launch")
        if self.launch is not None:
            check_answer_rule(self.name, self.launch.answer)
            pip = self.install is not None and self.install.manager == "pip"
            bad = self.launch.bad_placeholders(LAUNCH_PLACEHOLDERS if pip else tuple(p for p in LAUNCH_PLACEHOLDERS if p != "python"))
            if bad:
                known = ", ".join("$" + p for p in LAUNCH_PLACEHOLDERS)
                raise ForgeError(f"scaffold '{self.name}': its launch recipe has {len(bad)} bad placeholder"
                                 f"{'s' if len(bad) > 1 else ''}: {'; '.join(bad)} (known: {known}, $python for pip agents "
                                 "only, $mcp_config in launch.mcp.args only; $$ is a dollar sign)")
        if self.install is not None and (bad := self.install.bad_scripts()):
            raise ForgeError(f"scaffold '{self.name}': install.scripts: {'; '.join(bad)}")
        if self.options is not None and not (isinstance(self.options, type) and issubclass(self.options, BaseModel)):
            raise ForgeError(f"scaffold '{self.name}': options must be a pydantic model class")

    @classmethod
    def from_toml(cls, path: Path) -> "ScaffoldSpec":
        """Read a scaffold definition file (the format of Forge's own ``scaffolds/*.toml``)."""
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ForgeError(f"{path}: cannot read scaffold definition: {exc}") from None
        try:
            install = data.pop("install", None)
            launch = data.pop("launch", None)
            mcp = launch.pop("mcp", None) if launch else None
            spec = cls(
                install=InstallRecipe(**{**install, "extra_packages": tuple(install.get("extra_packages", ())),
                                         "scripts": tuple(str(path.parent / s) for s in install.get("scripts", ()))})
                if install
                else None,
                launch=LaunchSpec(
                    command=tuple(launch["command"]), env=launch.get("env", {}), files=launch.get("files", {}),
                    answer=launch.get("answer", "stdout"),
                    mcp=McpLaunch(**{**mcp, "args": tuple(mcp.get("args", ())), "server": dict(mcp.get("server", {}))})
                    if mcp is not None else None,
                )
                if launch
                else None,
                source_file=path,
                **data,
            )
        except (TypeError, KeyError, ValueError) as exc:
            raise ForgeError(f"{path}: invalid scaffold definition: {exc}") from None
        spec.validate()
        return spec


# ---------------------------------------------------------------------------------------------
# tool-call formats


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call: a name and its arguments (a JSON object, or a raw string for freeform tools)."""

    name: str
    arguments: dict[str, Any] | str
    id: str | None = None


@dataclass(frozen=True)
class ParseError:
    """A tool call the model tried to make and that did not parse: a process-reward signal."""

    text: str
    reason: str


@dataclass(frozen=True)
class ParsedOutput:
    """Generated text split into what the user sees (``content``), the tool calls it made, the
    calls that did not parse (``errors``) and the model's thinking (``reasoning``, split off by the
    model's reasoning parser; ``""`` when there was none or no parser is in use)."""

    content: str
    calls: list[ToolCall]
    errors: list[ParseError] = field(default_factory=list)
    reasoning: str = ""


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its name, description and JSON-schema ``parameters`` (the OpenAI
    function schema), ``freeform`` when it takes raw text instead of JSON arguments, and ``run``,
    the task's code that answers a call (sync or async; None where the tool is only described, as
    the gateway sees an agent's tools)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    run: "Callable[[Any], Any] | None" = None
    freeform: bool = False

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


class ToolFormat:
    """A tool-call format: how tool schemas go into the prompt and how calls come out of text.

    Subclasses set ``name`` and ``description`` and implement the three methods. The contract
    that tests check for every registered format: for any call ``c``,
    ``parse(format_calls([c])).calls == [c]`` (the round trip), and ``parse`` never raises —
    text that looks like a call but does not parse is returned in ``errors``.
    """

    name: str = ""
    description: str = ""
    # False for formats that can only write named arguments (an object), not a raw string
    freeform_arguments: bool = True
    # Text that may begin a call: while streaming, content is held back from the first of these
    # (or a partial one at the end) until the generation ends and the whole text is parsed.
    # A format with no markers streams no content before the end.
    markers: tuple[str, ...] = ()

    # How tools and earlier calls reach the prompt. "text": this format writes them
    # (:meth:`render_tools` into the system prompt, :meth:`format_calls` into assistant turns) for a
    # model whose chat template takes no tools, or as a prompt protocol of its own (ReAct).
    # "template": the model's chat template renders the tool schemas, structured assistant
    # ``tool_calls`` and tool results itself, and this format only parses; render_tools and
    # format_calls are then never called (see forge_cli.gateway.render). "code": the format renders
    # the whole conversation to prompt ids itself (:meth:`render_ids`: a family whose template is
    # code, gpt-oss's harmony) and parses.
    rendering: Literal["text", "template", "code"] = "text"

    def bind(self, tokenizer: Any) -> "ToolFormat":
        """This format for one model's tokenizer (a parser that reads special tokens needs it).
        Called once per gateway and format, off the event loop; the default needs nothing."""
        return self

    def render_tools(self, tools: list[dict[str, Any]]) -> str:
        """System-prompt text that lists ``tools`` (OpenAI function schemas) and how to call them."""
        raise NotImplementedError

    def format_calls(self, calls: list[ToolCall]) -> str:
        """The assistant text that makes ``calls`` in this format (for rendering history)."""
        raise NotImplementedError

    def render_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        """``rendering = "code"``: the prompt ids of ``messages`` (the chat-template convention:
        structured ``tool_calls``, ``reasoning_content``, tool results with ``tool_call_id``) and ``tools``,
        ready for the assistant to answer."""
        raise NotImplementedError

    def parse(self, text: str) -> ParsedOutput:
        """Split generated ``text`` into content and tool calls. Never raises.

        Opt-in, as pluggy's hooks: a ``parse(self, text, tools)`` also gets the request's tools (OpenAI
        function schemas), for a parser that types argument values by their schema."""
        raise NotImplementedError

    def validate(self) -> None:
        check_name("tool format", self.name)
        if not self.description:
            raise ForgeError(f"tool format '{self.name}': a description is required")
        if self.rendering not in ("text", "template", "code"):
            raise ForgeError(f"tool format '{self.name}': rendering must be 'text', 'template' or 'code', not {self.rendering!r}")
        needed = {"text": ("render_tools", "format_calls", "parse"), "template": ("parse",), "code": ("render_ids", "parse")}[self.rendering]
        for method in needed:
            if getattr(type(self), method) is getattr(ToolFormat, method):
                raise ForgeError(f"tool format '{self.name}': {method}() is not implemented")


def parse_calls(fmt: ToolFormat, text: str, tools: list[dict[str, Any]]) -> ParsedOutput:
    """``fmt.parse`` with the request's ``tools`` where its ``parse`` declares them (opt-in)."""
    if "tools" in inspect.signature(fmt.parse).parameters:
        return fmt.parse(text, tools=tools)  # type: ignore[call-arg]
    return fmt.parse(text)


class ReasoningParser:
    """Splits a model's thinking from its answer: ``<think>…</think>`` and the like.

    Subclasses set ``name`` and ``description`` and implement :meth:`split`. ``start`` and ``end``
    are the markers around the thinking where the format has them (streaming sends what comes
    before ``end`` as reasoning); a parser whose model starts thinking without a start marker (the
    prompt opened it) leaves ``start`` empty.
    """

    name: str = ""
    description: str = ""
    start: str = ""
    end: str = ""

    def bind(self, tokenizer: Any) -> "ReasoningParser":
        """This parser for one model's tokenizer; called once per gateway, off the event loop."""
        return self

    def split(self, text: str) -> tuple[str, str]:
        """``(reasoning, content)`` of generated ``text``; reasoning ``""`` when there is none. Never raises."""
        raise NotImplementedError

    def validate(self) -> None:
        check_name("reasoning parser", self.name)
        if not self.description:
            raise ForgeError(f"reasoning parser '{self.name}': a description is required")
        if type(self).split is ReasoningParser.split:
            raise ForgeError(f"reasoning parser '{self.name}': split() is not implemented")


# ---------------------------------------------------------------------------------------------
# sandboxes, tasks, rewards


@dataclass(frozen=True)
class SandboxSpec:
    """A place where agents run. ``check`` returns ``None`` when usable here, else why not.

    ``open(workdir, options, gateway)`` makes one trajectory's :class:`forge_cli.sandbox.contract.Sandbox`
    on the host folder ``workdir`` (``options``: the validated ``[sandboxes.NAME]`` section, an
    instance of ``options``, or ``None``; ``gateway``: a :class:`forge_cli.sandbox.contract.GatewayAccess`
    or ``None`` — a backend that isolates the network makes the gateway reachable inside at
    ``http://127.0.0.1:PORT`` through it); a sandbox without ``open`` is listed but cannot run agents yet.
    """

    name: str
    description: str
    check: Callable[[], str | None]
    options: type[BaseModel] | None = None
    open: Callable[[Path, Any, Any], Any] | None = None

    def validate(self) -> None:
        check_name("sandbox", self.name)
        if not callable(self.check):
            raise ForgeError(f"sandbox '{self.name}': check must be callable")
        if self.open is not None and not callable(self.open):
            raise ForgeError(f"sandbox '{self.name}': open must be callable")


@dataclass(frozen=True)
class RewardValue:
    """What a reward component gives one trajectory: a trajectory-level ``value`` (credited to its
    last completion: an outcome, a time bonus) and/or ``per_completion`` values, one per completion
    in ``seq`` order (credited to the completion that earned it: a parse error). The component's
    logged value is ``value + sum(per_completion)``."""

    value: float = 0.0
    per_completion: tuple[float, ...] | None = None


@dataclass(frozen=True)
class RewardSpec:
    """A named reward component: ``compute(trajectory, **context) -> float | RewardValue``.

    ``trajectory`` is the pool's :class:`~forge_cli.pool.types.Trajectory` (its completions, events,
    times and status). ``compute`` gets only the context arguments it declares (all of them with
    ``**context``): ``group`` (every trajectory of its group, itself included), ``outcome`` (its
    verifier's :class:`~forge_cli.tasks.types.Outcome`, None if not verified), ``outcomes``
    (trajectory id → Outcome or None, for the group), ``texts`` (each completion's output text, or
    None where not decoded), ``tools`` (the tool schemas the task offered) and ``settings`` (the
    :class:`~forge_cli.configs.rewards.RewardsConfig`). A float is a trajectory-level value. See
    :mod:`forge_cli.rewards`.
    """

    name: str
    description: str
    compute: Callable[..., "float | RewardValue"]

    def validate(self) -> None:
        check_name("reward", self.name)
        if not callable(self.compute):
            raise ForgeError(f"reward '{self.name}': compute must be callable")
