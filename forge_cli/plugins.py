"""Plugin loading and the registry of what plugins registered.

Built-ins are plugins like any other: modules listed in :data:`BUILTIN_PLUGINS`, registered with
the same pluggy manager and called through the same hooks as third-party distributions, which
are found under the entry-point group ``forge``.

``FORGE_LOAD_PLUGINS`` restricts third-party loading to an allow-list of distribution (or
entry-point) names, comma separated; set but empty means built-ins only.

A plugin that fails to import, raises inside a hook, or registers something invalid costs one
warning line naming it; everything else keeps working.

Hooks are called one implementation at a time (that is how each registration is attributed to
its plugin) but as pluggy would call them: each implementation gets only the arguments it
declares, and ``wrapper``/``hookwrapper`` implementations are refused with a warning instead of
being called. Plugins are called in load order — built-ins, then entry points, then ``extra`` —
and on a duplicate name the first registration wins.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import pluggy

from forge_cli import __version__, hookspecs
from forge_cli.configs.common import validate_options
from forge_cli.console import warn
from forge_cli.errors import ForgeError
from forge_cli.specs import ReasoningParser, RewardSpec, SandboxSpec, ScaffoldSpec, ToolFormat
from forge_cli.tasks.types import TaskSuite

ENTRY_POINT_GROUP = "forge"

# name -> module of each built-in plugin
BUILTIN_PLUGINS: dict[str, str] = {
    "forge:scaffolds": "forge_cli.builtin.scaffolds",
    "forge:tool-formats": "forge_cli.builtin.tool_formats",
    "forge:vllm-parsers": "forge_cli.builtin.vllm_parsers",
    "forge:sandboxes": "forge_cli.builtin.sandboxes",
    "forge:tasks": "forge_cli.builtin.tasks",
    "forge:rewards": "forge_cli.builtin.rewards",
}

# hook name -> (registry attribute, accepted type, label used in messages)
REGISTER_HOOKS: dict[str, tuple[str, type, str]] = {
    "register_scaffolds": ("scaffolds", ScaffoldSpec, "scaffold"),
    "register_tool_formats": ("tool_formats", ToolFormat, "tool format"),
    "register_reasoning_parsers": ("reasoning_parsers", ReasoningParser, "reasoning parser"),
    "register_sandboxes": ("sandboxes", SandboxSpec, "sandbox"),
    "register_tasks": ("tasks", TaskSuite, "task suite"),
    "register_rewards": ("rewards", RewardSpec, "reward"),
}


@dataclass
class PluginInfo:
    """A loaded plugin: its name, where it came from and what it registered."""

    name: str
    version: str
    builtin: bool
    module: str
    hooks: list[str] = field(default_factory=list)
    registered: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Entry:
    """One registered thing and the plugin it came from."""

    name: str
    value: Any
    plugin: str


class Registry:
    """Everything the loaded plugins registered, validated, with warnings for what was rejected."""

    def __init__(self) -> None:
        self.scaffolds: dict[str, Entry] = {}
        self.tool_formats: dict[str, Entry] = {}
        self.reasoning_parsers: dict[str, Entry] = {}
        self.sandboxes: dict[str, Entry] = {}
        self.tasks: dict[str, Entry] = {}
        self.rewards: dict[str, Entry] = {}
        self.plugins: dict[str, PluginInfo] = {}
        self.warnings: list[str] = []

    def scaffold(self, name: str) -> ScaffoldSpec:
        entry = self.scaffolds.get(name)
        if entry is None:
            near = difflib.get_close_matches(name, self.scaffolds, n=5, cutoff=0.5)
            families = sorted(n for n, e in self.scaffolds.items() if "_" not in n and n.count("-") <= 1)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            shown = ", ".join(families[:20]) or "none"
            raise ForgeError(f"no scaffold named '{name}' ({hint}{len(self.scaffolds)} registered, among them {shown}; "
                             "forge scaffold list shows them all)")
        return entry.value

    def tool_format(self, name: str) -> ToolFormat:
        entry = self.tool_formats.get(name)
        if entry is None:
            known = ", ".join(sorted(self.tool_formats)) or "none"
            raise ForgeError(f"no tool format named '{name}' (registered: {known})")
        return entry.value

    def options_for(self, kind: str, name: str, raw: dict[str, Any], source: "str | Callable[[str], str]") -> Any:
        """Validate a plugin's ``[kind.name]`` config section against the model it registered.

        ``source`` says where the section came from: a name (``forge.toml``), or a function from a dotted
        config key to where its value came from (:meth:`forge_cli.config.ForgeConfig.origin`: the file, an
        environment variable, a ``--set`` flag), so that an error blames the layer that set the bad key."""
        table = {"scaffolds": self.scaffolds, "sandboxes": self.sandboxes}[kind]
        origin_of = source if callable(source) else (lambda _key: source)
        if name not in table:
            known = ", ".join(sorted(table)) or "none"
            raise ForgeError(f"{origin_of(f'{kind}.{name}')}: [{kind}.{name}]: no {kind[:-1]} named '{name}' is registered "
                             f"(known: {known})")
        return validate_options(table[name].value.options, raw, f"[{kind}.{name}]",
                                lambda key: origin_of(f"{kind}.{name}" + (f".{key}" if key else "")))

    def validate_config_sections(self, config: Any, source: "str | Callable[[str], str] | None" = None) -> None:
        """Validate every ``[scaffolds.NAME]`` and ``[sandboxes.NAME]`` of ``config``; errors blame the layer
        that set the key (``config.origin``) unless a ``source`` is given."""
        for kind in ("scaffolds", "sandboxes"):
            for name, raw in getattr(config, kind).items():
                self.options_for(kind, name, raw, source if source is not None else config.origin)


def _make_register(registry: Registry, hook: str, plugin: str) -> Callable[[Any], None]:
    attr, expected, label = REGISTER_HOOKS[hook]
    table: dict[str, Entry] = getattr(registry, attr)
    info = registry.plugins[plugin]

    def register(thing: Any) -> None:
        if not isinstance(thing, expected):
            registry.warnings.append(
                f"plugin '{plugin}': {hook} got {type(thing).__name__}, expected {expected.__name__}; ignored"
            )
            return
        try:
            thing.validate()
        except ForgeError as exc:
            registry.warnings.append(f"plugin '{plugin}': invalid {label}: {exc}; ignored")
            return
        name = thing.name
        if name in table:
            registry.warnings.append(
                f"plugin '{plugin}': {label} '{name}' is already registered by plugin '{table[name].plugin}'; ignored"
            )
            return
        table[name] = Entry(name=name, value=thing, plugin=plugin)
        info.registered.setdefault(attr, []).append(name)

    return register


def _allow_list() -> set[str] | None:
    raw = os.environ.get("FORGE_LOAD_PLUGINS")
    if raw is None:
        return None
    return {item.strip() for item in raw.split(",") if item.strip()}


def _entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def normalise_name(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def load_plugins(extra: Iterable[tuple[str, Any]] = ()) -> tuple[pluggy.PluginManager, Registry]:
    """Create the plugin manager, load built-ins, third parties and ``extra`` (name, module) pairs.

    Never raises for a plugin's fault: failures become ``registry.warnings``.
    """
    pm = pluggy.PluginManager("forge")
    pm.add_hookspecs(hookspecs)
    registry = Registry()

    def add(name: str, obj: Any, version: str, builtin: bool) -> None:
        try:
            pm.register(obj, name=name)
        except Exception as exc:  # pluggy validates hook signatures here
            registry.warnings.append(f"plugin '{name}' was not loaded: {exc}")
            return
        unknown = [
            n for n in dir(obj) if hasattr(getattr(obj, n, None), "forge_impl") and getattr(pm.hook, n).spec is None
        ]
        for hook_name in unknown:
            registry.warnings.append(f"plugin '{name}' implements unknown hook '{hook_name}'; it is never called")
        hooks = sorted(_hooks_of(pm, obj))
        registry.plugins[name] = PluginInfo(name, version, builtin, getattr(obj, "__name__", repr(obj)), hooks)

    for name, module_name in BUILTIN_PLUGINS.items():
        add(name, importlib.import_module(module_name), __version__, True)

    allow = _allow_list()
    seen_dists: set[str] = set()
    for ep in _entry_points():
        dist = ep.dist.name if ep.dist is not None else ep.name
        if allow is not None and normalise_name(dist) not in {normalise_name(a) for a in allow} and ep.name not in allow:
            continue
        label = dist if dist not in seen_dists else f"{dist}:{ep.name}"
        seen_dists.add(dist)
        try:
            obj = ep.load()
        except Exception as exc:
            registry.warnings.append(
                f"plugin '{label}' failed to load ({ep.value}): {type(exc).__name__}: {exc}"
            )
            continue
        add(label, obj, ep.dist.version if ep.dist is not None else "?", False)

    for name, obj in extra:
        add(name, obj, "local", False)
    return pm, registry


def _hooks_of(pm: pluggy.PluginManager, plugin: Any) -> list[str]:
    return [caller.name for caller in pm.get_hookcallers(plugin) or []]


def _impls_in_load_order(pm: pluggy.PluginManager, registry: Registry, hook: str) -> list[Any]:
    """``hook``'s implementations, one per plugin, in the order the plugins were loaded.

    Not pluggy's call order (later-registered first, moved by ``tryfirst``/``trylast``): for
    ``register_*`` hooks the order decides which of two registrations of one name wins, and that
    must not be something a plugin can change by asking to run first or last.
    """
    by_plugin = {impl.plugin_name: impl for impl in getattr(pm.hook, hook).get_hookimpls()}
    return [by_plugin[name] for name in registry.plugins if name in by_plugin]


def call_impl(impl: Any, kwargs: dict[str, Any]) -> Any:
    """Call one hook implementation the way pluggy does: with only the arguments it declares.

    ``impl.argnames`` are the implementation's own parameters (pluggy checked at registration
    that they are a subset of the hookspec's), so a hookspec can gain an argument without breaking
    a plugin written before it; parameters with defaults get a value only if the call has one.
    """
    args = [kwargs[name] for name in impl.argnames]
    extra = {name: kwargs[name] for name in impl.kwargnames if name in kwargs}
    return impl.function(*args, **extra)


def _is_wrapper(impl: Any, hook: str, registry: Registry) -> bool:
    if not (impl.wrapper or impl.hookwrapper):
        return False
    which = "wrapper=True" if impl.wrapper else "hookwrapper=True"
    registry.warnings.append(
        f"plugin '{impl.plugin_name}': its {hook} is a wrapper ({which}); Forge calls each plugin's "
        f"{hook} on its own, so there is nothing to wrap: refused, not run"
    )
    return True


def collect(pm: pluggy.PluginManager, registry: Registry, **arguments: Any) -> Registry:
    """Call every ``register_*`` hook, one plugin at a time, so a failure stays with its plugin.

    ``arguments`` are passed, besides ``register``, to implementations that declare them (for a
    hookspec that has gained an argument); an implementation that does not declare one never
    sees it.

    Calling each implementation separately (rather than once through ``pm.hook``) is what lets
    the host know which plugin registered what, and keep going when one of them raises. Plugins
    are called in load order (built-ins first, then entry points, then ``extra``), and the first
    registration of a name wins: a later plugin cannot replace a built-in or an earlier plugin's
    scaffold, format, sandbox, task set or reward; it gets one warning line instead.
    """
    for hook in REGISTER_HOOKS:
        for impl in _impls_in_load_order(pm, registry, hook):
            if _is_wrapper(impl, hook, registry):
                continue
            plugin = impl.plugin_name
            register = _make_register(registry, hook, plugin)
            try:
                call_impl(impl, {**arguments, "register": register})
            except Exception as exc:
                registry.warnings.append(f"plugin '{plugin}': {hook} raised {type(exc).__name__}: {exc}")
    return registry


def add_commands(pm: pluggy.PluginManager, registry: Registry, app: Any) -> None:
    """Call ``register_commands(app=...)`` on every plugin, isolating failures like :func:`collect`."""
    for impl in _impls_in_load_order(pm, registry, "register_commands"):
        if _is_wrapper(impl, "register_commands", registry):
            continue
        try:
            call_impl(impl, {"app": app})
        except Exception as exc:
            registry.warnings.append(f"plugin '{impl.plugin_name}': register_commands raised {type(exc).__name__}: {exc}")


class _Loaded:
    """The process-wide plugin state: loaded once, hooks collected on first use."""

    pm: pluggy.PluginManager | None = None
    registry: Registry | None = None
    collected = False
    printed = 0


def get_manager_uncollected() -> tuple[pluggy.PluginManager, Registry]:
    """Load (import) every plugin once, without calling the ``register_*`` hooks yet."""
    if _Loaded.pm is None:
        _Loaded.pm, _Loaded.registry = load_plugins()
    assert _Loaded.registry is not None
    return _Loaded.pm, _Loaded.registry


def get_registry() -> Registry:
    """The process-wide registry: plugins loaded once, ``register_*`` hooks collected once."""
    pm, registry = get_manager_uncollected()
    if not _Loaded.collected:
        collect(pm, registry)
        _Loaded.collected = True
    return registry


def flush_warnings() -> None:
    """Print (once each) the warnings gathered so far, one yellow line per plugin problem."""
    if _Loaded.registry is None:
        return

    for message in _Loaded.registry.warnings[_Loaded.printed :]:
        warn(message)
    _Loaded.printed = len(_Loaded.registry.warnings)


def reset() -> None:
    """Forget the loaded plugins (tests; after installing a plugin in-process)."""
    _Loaded.pm, _Loaded.registry, _Loaded.collected, _Loaded.printed = None, None, False, 0
    importlib.invalidate_caches()
