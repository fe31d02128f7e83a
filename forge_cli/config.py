"""``forge.toml``: typed configuration with documented defaults.

Precedence, lowest first: the defaults below < ``forge.toml`` (the working directory's, or
``--config``) < environment variables ``FORGE_<SECTION>__<KEY>`` (``FORGE_POOL__MAX_ACTIVE_GROUPS=32``)
< CLI flags (``--set pool.max_active_groups=32`` and each command's own options).

Any unknown key, wrong type or out-of-range value is a :class:`ForgeError` whose one line names
the key and where it came from. Plugin sections (``[scaffolds.NAME]``, ``[sandboxes.NAME]``) are
kept as raw tables here and validated against the model the plugin registered, when the plugin's
thing is used (see :func:`forge_cli.plugins.Registry.options_for`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from forge_cli.engine import EngineConfig, VLLMEngineConfig
from forge_cli.engine.router import ROUTING_POLICIES
from forge_cli.errors import ForgeError
from forge_cli.pool.scheduler import SchedulerConfig, WindowedFIFOScheduler
from forge_cli.rollout.executors import EXECUTORS
from forge_cli.rewards.config import RewardsConfig
from forge_cli.train.config import (ATTENTION_MODES, SPLITS, CISPOLoss, DeepSpeedTrainEngine, LossConfig, TrainEngineConfig,
                                    WarmStartConfig)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG_FILENAME = "forge.toml"
ENV_PREFIX = "FORGE_"
# FORGE_* variables that are settings of the process, not config keys.
NON_CONFIG_ENV = {"FORGE_HOME", "FORGE_LOAD_PLUGINS", "FORGE_VENV", "FORGE_ACCEL", "FORGE_CONFIG", "FORGE_ADMIN_KEY"}


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RunConfig(Section):
    """Where runs are written: each run gets ``<dir>/<name>/`` with ``config.json`` inside."""

    dir: Path = Field(Path("runs"), description="Folder that holds one sub-folder per run.")
    name: str | None = Field(None, description="Run name; default is a timestamp.")
    seed: int = Field(0, ge=0, description="Seed for every random generator of a run.")


class ModelConfig(Section):
    """The policy being trained and served."""

    path: Path | None = Field(
        None, description="A local Hugging Face model folder; default: the embedded model under FORGE_HOME."
    )
    engine: EngineConfig = Field(
        default_factory=VLLMEngineConfig,
        description='Rollout engine: [model.engine] with type = "vllm" | "hf" | "scripted" and that engine\'s fields '
                    '(model.engine = "hf" is short for type = "hf").')
    tool_format: str = Field("hermes", description="Tool-call format for sessions that do not choose one.")
    max_model_len: int | None = Field(None, gt=1, description="Longest prompt + output, in tokens, for every engine; "
                                      "default: the model's own limit (max_position_embeddings).")
    replicas: int = Field(1, ge=1, le=64, description="Engine replicas behind the gateway's router.")
    routing: Literal[tuple(ROUTING_POLICIES)] = Field(  # type: ignore[valid-type]
        "cache_aware", description="How the router picks a replica: " + "; ".join(f"{k}: {v}" for k, v in ROUTING_POLICIES.items()) + ".")

class GatewayConfig(Section):
    """The OpenAI/Anthropic-compatible HTTP server agents talk to."""

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0: any free port).")
    auth: Literal["auto", "loopback", "strict"] = Field(
        "auto", description="auto = loopback on 127.0.0.1/localhost, strict elsewhere."
    )
    socket: str = Field(
        "auto", description='Also listen on this unix socket (sandboxed agents reach the gateway through it): '
                            '"auto" = gateway.sock in the run folder, "" = TCP only, else a path.'
    )

    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="Larger request bodies get a 413.")
    body_timeout_s: float = Field(30.0, gt=0, description="A request body not fully received by then gets a 408.")

    @field_validator("socket")
    @classmethod
    def _socket_is_auto_none_or_a_path(cls, value: str) -> str:
        if value in ("", "auto") or "/" in value or value.endswith(".sock"):
            return value
        raise ValueError(f'{value!r} is neither "auto", "" (no socket) nor a path (one with a "/" or ending in .sock)')


class PoolConfig(Section):
    """The data pool and the scheduler that feeds the trainer (DESIGN.md §4)."""

    url: str = Field("sqlite", description='"sqlite" (a file in the run folder) or "postgresql://…".')
    scheduler: SchedulerConfig = Field(default_factory=WindowedFIFOScheduler, description=(
        'Which finished groups the trainer may take: [pool.scheduler] with type = "windowed_fifo" (and window_fraction) '
        '| "fifo" (W = 1) | "greedy" (W = ∞).'))
    max_active_groups: int = Field(16, gt=0, description="N: groups submitted and not yet consumed.")
    group_timeout_s: float = Field(1800.0, gt=0, description="A head group older than this is marked timed out.")
    on_timeout: Literal["drop", "train"] = Field(
        "drop", description="What to do with a timed-out group: drop it, or train on it with its failure reward."
    )


class TrainConfig(Section):
    """The trainer."""

    engine: TrainEngineConfig = Field(default_factory=DeepSpeedTrainEngine, description=(
        'Train engine: [train.engine] with type = "deepspeed" (and zero_stage; the default: one process or many under '
        'its launcher) | "torch" (one process); train.engine = "torch" is short for its table.'))
    lr: float = Field(5e-5, gt=0, description="Learning rate (AdamW).")
    groups_per_step: int = Field(4, gt=0, description="P: groups consumed per train step.")
    group_size: int = Field(8, gt=0, description="n: trajectories sampled per task.")
    updates_per_step: int = Field(1, ge=1, le=16, description=(
        "Optimizer updates on each step's batch (PPO's epochs): more learning per sampled trajectory when rollouts "
        "are the bottleneck. The ratios stay against the sampler's logprobs: ppo_clip's and grpo's clip bounds the "
        "drift; cispo's detached weight does not (every token keeps its gradient), nor do reinforce and "
        "cross_entropy, which ignore the ratio. The step's logged stats are the last update's."))
    micro_batch_tokens: int = Field(8192, gt=0, description="Token budget of one packed micro-batch.")
    attention: Literal[tuple(ATTENTION_MODES)] = Field(  # type: ignore[valid-type]
        "auto", description="Prefix-tree attention: " + "; ".join(f"{k}: {v}" for k, v in ATTENTION_MODES.items()) + ".")
    split: Literal[tuple(SPLITS)] = Field(  # type: ignore[valid-type]
        "auto", description="A tree over micro_batch_tokens: " + "; ".join(f"{k}: {v}" for k, v in SPLITS.items()) + ".")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 mixed precision on a GPU that supports it, float32 otherwise.")
    threads: int | None = Field(None, ge=1, description=(
        "CPU threads a train step may use (unset: torch's default, every core); on a CPU that also runs the "
        "rollout engine, fewer leave it cores."))
    loss: LossConfig = Field(default_factory=CISPOLoss, description=(
        'The policy-gradient loss: [train.loss] with type = "cispo" | "ppo_clip" | "grpo" | "reinforce" and its fields.'))
    checkpoint_every: int = Field(10, ge=0, description="Train steps between checkpoints (0: only at the end).")
    eval_every: int = Field(10, ge=0, description="Train steps between held-out evaluations (0: none).")
    eval_tasks: int = Field(32, ge=1, description="Held-out tasks per evaluation (the same ones each time).")
    eval_samples: int = Field(4, ge=1, description="Sampled trajectories per held-out task per evaluation.")
    minutes: float | None = Field(None, gt=0, description=(
        "Wall-time budget of forge train (--minutes); unset: 15 on the embedded default, none with a model.path."))
    warmstart: WarmStartConfig = Field(default_factory=WarmStartConfig, description=(
        "[train.warmstart]: supervised fine-tuning on synthetic traces before RL (forge model warmstart)."))

class RolloutConfig(Section):
    """``forge rollout``: what runs on which tasks (each flag of the command overrides its key)."""

    scaffold: str = Field("react", description="The scaffold to run (forge scaffold list).")
    task: str = Field("calc", description="A registered task suite, or a JSONL file of tasks (then verifier is required).")
    verifier: str | None = Field(None, description="For a JSONL task file: module:function that verifies a task.")
    split: Literal["train", "heldout"] = Field("train", description="Which split of the suite.")
    groups: int = Field(4, ge=1, description="Tasks (groups) to run; each runs train.group_size trajectories.")
    concurrency: int = Field(8, ge=1, description="Trajectories running at once.")
    trajectory_timeout_s: float = Field(600.0, gt=0, description="A trajectory running longer is ended as timed out.")
    max_tokens_per_trajectory: int | None = Field(
        None, ge=1, description="Output tokens a trajectory may sample in all (calls past it get a 409); none if unset.")
    executor: Literal[tuple(EXECUTORS)] = Field(  # type: ignore[valid-type]
        "local", description="Where scaffolds run: local (the driver's process) or ray (Ray tasks).")
    ray_address: str | None = Field(None, description="executor = ray: a Ray cluster's address (default: a local Ray).")
    sandbox: str = Field("local", description=(
        "Where black-box agents run: a registered sandbox (forge sandbox status / forge doctor), e.g. local "
        "(bubblewrap where installed) or docker; its options are [sandboxes.NAME]. A black-box agent's own "
        "[scaffolds.NAME] sandbox wins."))
    mix: dict[str, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(default_factory=dict, description=(
        "Mixed-domain rollouts: suite name -> weight (e.g. {calc = 2.0, qa = 1.0}); each group's suite is drawn by "
        "weight from run.seed, its tasks keep their suite's verifier and tools. Empty: task alone."))


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


def _union_paths(model: type[BaseModel] = None, prefix: str = "") -> set[str]:  # type: ignore[assignment]
    """Dotted keys of the sections that are discriminated unions (``model.engine``, …)."""
    model = model or ForgeConfig
    paths = set()
    for name, info in model.model_fields.items():
        if info.discriminator is not None:
            paths.add(prefix + name)
        elif isinstance(info.annotation, type) and issubclass(info.annotation, Section):
            paths |= _union_paths(info.annotation, f"{prefix}{name}.")
    return paths


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


def _describe_error(exc: ValidationError, origin_of: Any) -> str:
    err = exc.errors()[0]
    parts, tag = [], None
    for part in err["loc"]:
        if parts and ".".join(parts) in _union_paths() and tag is None and isinstance(part, str) and part in _union_tags(parts):
            tag = part  # pydantic's name for the union member it tried
            continue
        parts.append(str(part))
    dotted = ".".join(parts)
    origin = origin_of(dotted)
    kind = err["type"]
    if kind == "extra_forbidden":
        what = f"unknown key for type = {tag!r}" if tag else "unknown key"
    elif kind == "missing":
        what = "required key is missing"
    elif kind == "union_tag_invalid":
        what = f"type must be one of {err['ctx']['expected_tags']} (got {err['ctx']['tag']!r})"
    else:
        got = err.get("input")
        what = f"{err['msg']} (got {got!r})" if not isinstance(got, dict) else err["msg"]
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{origin}: {dotted}: {what}{more}"


def _union_tags(parts: list[str]) -> set[str]:
    """The ``type`` names of the union at the dotted path ``parts``."""
    model: Any = ForgeConfig
    for part in parts[:-1]:
        model = model.model_fields[part].annotation
    info = model.model_fields[parts[-1]]
    members = getattr(info.annotation, "__args__", ())
    return {m.model_fields["type"].default for m in members if isinstance(m, type) and issubclass(m, BaseModel)}


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
        return ForgeConfig.model_validate(merged)
    except ValidationError as exc:
        raise ForgeError(_describe_error(exc, origin_of)) from None


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


def validate_options(model: type[BaseModel] | None, raw: Mapping[str, Any], where: str) -> BaseModel | dict[str, Any]:
    """Validate one plugin section (``[scaffolds.NAME]``) against the model its plugin registered.

    ``where`` names the section for the error (``forge.toml [scaffolds.NAME]``). A plugin that
    registered no model accepts no keys.
    """
    if model is None:
        if raw:
            raise ForgeError(f"{where}: unknown key '{next(iter(raw))}' (this takes no options)")
        return {}
    try:
        return model.model_validate(dict(raw))
    except ValidationError as exc:
        raise ForgeError(_describe_error(exc, lambda _d: where)) from None
