"""``forge.toml``: typed configuration with documented defaults.

Precedence, lowest first: the defaults below < ``forge.toml`` (the working directory's, or
``--config``) < environment variables ``FORGE_<SECTION>__<KEY>`` (``FORGE_POOL__MAX_ACTIVE_GROUPS=32``)
< CLI flags (``--set pool.max_active_groups=32`` and each command's own options).

Any unknown key, wrong type or out-of-range value is a :class:`ForgeError` whose one line names
the key and where it came from. Each section's model is in :mod:`forge_cli.configs`; this module
only assembles them and loads the layers. Plugin sections (``[scaffolds.NAME]``, ``[sandboxes.NAME]``) are
kept as raw tables here and validated against the model the plugin registered, when the plugin's
thing is used (see :func:`forge_cli.plugins.Registry.options_for`); :meth:`ForgeConfig.origin` says
where each of their keys came from, for those errors.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from pydantic import Field, PrivateAttr, ValidationError

from forge_cli.configs.common import Section, describe_error, union_paths
from forge_cli.configs.gateway import GatewayConfig
from forge_cli.configs.model import ModelConfig
from forge_cli.configs.pool import PoolConfig, staleness_cap_error
from forge_cli.configs.rewards import RewardsConfig
from forge_cli.configs.rollout import RolloutConfig
from forge_cli.configs.run import RunConfig
from forge_cli.configs.train import TrainConfig
from forge_cli.errors import ForgeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG_FILENAME = "forge.toml"
ENV_PREFIX = "FORGE_"
# FORGE_* variables that are settings of the process, not config keys.
NON_CONFIG_ENV = {"FORGE_HOME", "FORGE_LOAD_PLUGINS", "FORGE_VENV", "FORGE_ACCEL", "FORGE_CONFIG", "FORGE_ADMIN_KEY",
                  "FORGE_EVENT_LOOP"}


class ForgeConfig(Section):
    """The whole configuration. Every field has a default; ``forge.toml`` may be empty."""

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    pool: PoolConfig = Field(default_factory=PoolConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    rewards: RewardsConfig = Field(default_factory=RewardsConfig)
    scaffolds: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="[scaffolds.NAME]: options handed to the plugin that registered NAME."
    )
    sandboxes: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="[sandboxes.NAME]: options handed to the plugin that registered NAME."
    )
    _origin_of: Any = PrivateAttr(default=None)  # dotted key -> where its value came from (load_config sets it)

    def origin(self, dotted: str) -> str:
        """Where the value of the dotted key ``dotted`` came from: ``command-line flag --set KEY``, ``environment
        variable FORGE_…``, the config file's path, or ``defaults`` (for a plugin section's errors)."""
        return self._origin_of(dotted) if self._origin_of is not None else "defaults"

    def __eq__(self, other: object) -> bool:  # where the values came from is not part of the configuration
        return isinstance(other, ForgeConfig) and self.__dict__ == other.__dict__

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


# ---------------------------------------------------------------------------------------------
# loading


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any, origin: str) -> None:
    parts = [p for p in dotted.split(".")]
    if not all(parts):
        raise ForgeError(f"{origin}: '{dotted}' is not a dotted config key like pool.max_active_groups")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ForgeError(f"{origin}: '{dotted}': '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _union_paths() -> set[str]:
    """Dotted keys of the sections that are discriminated unions (``model.engine``, …)."""
    return union_paths(ForgeConfig)


def _as_union_tables(tree: Any, unions: set[str], prefix: str = "") -> Any:
    """One layer with every union given by name (``engine = "hf"``) written as its table."""
    if not isinstance(tree, Mapping):
        return tree
    out = {}
    for key, value in tree.items():
        dotted = prefix + key
        if dotted in unions and isinstance(value, str):
            value = {"type": value}
        out[key] = _as_union_tables(value, unions, dotted + ".")
    return out


def _with_default_types(tree: dict[str, Any], unions: set[str]) -> dict[str, Any]:
    """A union's table that names no ``type`` (``[model.engine]`` with a field or two) is of the
    default type."""
    defaults = ForgeConfig()
    for dotted in unions:
        *parents, key = dotted.split(".")
        node: Any = tree
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(key), dict) and "type" not in node[key]:
            default: Any = defaults
            for part in dotted.split("."):
                default = getattr(default, part)
            node[key] = {"type": default.type, **node[key]}
    return tree


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, table by table; a table naming another ``type`` than the one
    below it replaces it whole (the fields of one engine mean nothing to another)."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, dict) and below.get("type", value.get("type")) == value.get("type", below.get("type")):
            out[key] = _merge(below, value)
        else:
            out[key] = value
    return out


def parse_value(raw: str) -> Any:
    """A value given as text (environment, ``--set``): TOML syntax if it parses, else the string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def find_config_file(
    explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Path | None:
    """``--config`` (or ``$FORGE_CONFIG``) if given (it must exist), else ``./forge.toml`` if present."""
    chosen = explicit or (os.environ if env is None else env).get("FORGE_CONFIG")
    if chosen:
        path = Path(chosen).expanduser()
        if path.is_dir():
            raise ForgeError(f"config file {path} is a folder; give the path of a forge.toml")
        if not path.is_file():
            raise ForgeError(f"config file {path} does not exist")
        return path
    local = Path.cwd() / CONFIG_FILENAME
    return local if local.is_file() else None


def _flat_keys(tree: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in tree.items():
        keys.append(prefix + key)
        if isinstance(value, Mapping):
            keys += _flat_keys(value, f"{prefix}{key}.")
    return keys


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ForgeError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ForgeError(f"{path}: not a TOML file: byte {exc.start} is not UTF-8 text") from None
    except OSError as exc:
        raise ForgeError(f"{path}: cannot read: {exc.strerror}") from None


def _env_layer(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Config keys from ``FORGE_SECTION__KEY`` variables, and which variable set each key."""
    tree: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, raw in sorted(env.items()):
        if not name.startswith(ENV_PREFIX) or name in NON_CONFIG_ENV or "__" not in name:
            continue
        dotted = ".".join(part.lower() for part in name[len(ENV_PREFIX):].split("__"))
        _set_dotted(tree, dotted, parse_value(raw), f"environment variable {name}")
        origins[dotted] = f"environment variable {name}"
    return tree, origins


def describe_config_error(exc: ValidationError, origin_of: Any) -> str:
    """One line for a ``ForgeConfig`` that does not validate: the key, where it came from, what is wrong."""
    return describe_error(exc, ForgeConfig, origin_of)


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    flag_names: Mapping[str, str] | None = None,
) -> ForgeConfig:
    """Resolve the configuration: defaults < file < environment < ``overrides`` (dotted keys).

    Raises :class:`ForgeError` with one line naming the bad key and its source; ``flag_names`` maps
    an override's dotted key to the flag the user typed (``{"model.engine": "--engine"}``), else
    it is named ``--set KEY``.
    """
    env = os.environ if env is None else env
    file = find_config_file(path, env)
    file_tree = _read_toml(file) if file else {}
    env_tree, env_origins = _env_layer(env)
    flag_tree: dict[str, Any] = {}
    for dotted, value in (overrides or {}).items():
        _set_dotted(flag_tree, dotted, value, "command-line flag")

    layers = [({k: f"command-line flag {(flag_names or {}).get(k, f'--set {k}')}" for k in overrides or {}}),
              env_origins, {k: str(file) for k in _flat_keys(file_tree)}]

    def origin_of(dotted: str) -> str:
        """The highest layer that set ``dotted`` itself; else a key inside it; else a section holding it (``model.engine =
        "hf"``) — the deepest one; else the file, or the defaults."""
        for match in (lambda k: k == dotted, lambda k: k.startswith(dotted + ".")):
            for layer in layers:
                for key, origin in layer.items():
                    if match(key):
                        return origin
        holding = [(len(k), -i, o) for i, layer in enumerate(layers) for k, o in layer.items() if dotted.startswith(k + ".")]
        return max(holding)[2] if holding else (str(file) if file else "defaults")

    unions = _union_paths()
    file_tree, env_tree, flag_tree = (_as_union_tables(t, unions) for t in (file_tree, env_tree, flag_tree))
    # the file is the lowest layer written by hand: a table of its that names no type is of the default
    # type (so another layer naming a type replaces it); a variable's or flag's adds to what is below
    file_tree = _with_default_types(file_tree, unions)
    merged = _with_default_types(_merge(_merge(file_tree, env_tree), flag_tree), unions)
    try:
        config = ForgeConfig.model_validate(merged)
    except ValidationError as exc:
        raise ForgeError(describe_config_error(exc, origin_of)) from None
    if (error := staleness_cap_error(config.pool, config.train.groups_per_step)) is not None:  # two sections' keys
        raise ForgeError(error)
    config._origin_of = origin_of
    return config


def parse_set_flags(items: list[str]) -> dict[str, Any]:
    """``--set key=value`` flags into dotted overrides (values in TOML syntax, else strings)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ForgeError(f"--set expects KEY=VALUE (like pool.max_active_groups=32), got {item!r}")
        out[key.strip()] = parse_value(raw.strip())
    return out


def upgrade_saved(data: Any) -> Any:
    """A run's saved ``config.json`` from an older Forge, in today's shape: ``pool.window_fraction``
    became the windowed-FIFO scheduler's own field (the bare names of the union sections are
    read as they are)."""
    pool = data.get("pool") if isinstance(data, dict) else None
    if isinstance(pool, dict) and "window_fraction" in pool:
        pool = dict(pool)
        fraction = pool.pop("window_fraction")
        scheduler = pool.get("scheduler", "windowed_fifo")
        if scheduler == "windowed_fifo":
            scheduler = {"type": "windowed_fifo", "window_fraction": fraction}
        pool["scheduler"] = scheduler
        data = {**data, "pool": pool}
    return data


def write_resolved(config: ForgeConfig, run_dir: Path) -> Path:
    """Write the resolved configuration as ``config.json`` into a run folder (created if needed)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / "config.json"
    out.write_text(json.dumps(json.loads(config.to_json()), indent=2) + "\n")
    return out
