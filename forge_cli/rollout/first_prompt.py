"""How long a black-box agent's first prompt is on the current model, measured for real.

Real agents send long first prompts (their system prompt, tool schemas, examples), and a prompt
longer than the model's context gets a 400 on the agent's very first call. :func:`first_prompt_length`
launches the installed agent once, as a plain subprocess, against a gateway of its own on 127.0.0.1
(the scripted engine over the current model, a pool in a temporary folder) on a fixed ``swe-mini``
task (:data:`MEASURE_TASK`: the first train task of seed 0), waits for its first completion to be
recorded, stops the agent and returns the length of that completion's ``prompt_ids``: the agent's
own request rendered by the model's chat template and tokenizer. The result is cached under
``$FORGE_HOME/cache/first-prompts.json``, keyed by the agent's installed requirement and version
and by a digest of the model's tokenizer and chat template, so ``forge scaffold show`` measures
once per agent and model.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forge_cli.engine.default_model import TOKENIZER_FILES, resolve_model_path
from forge_cli.engine.scripted import FilePolicy, ScriptedEngine
from forge_cli.errors import ForgeError
from forge_cli.gateway.server import serve_gateway
from forge_cli.paths import forge_home
from forge_cli.plugins import get_registry
from forge_cli.rollout.blackbox import find_install, run_blackbox
from forge_cli.tasks.suites import resolve_suite

CACHE_FILE = "first-prompts.json"
MEASURE_TASK = ("swe-mini", "train", 0)  # suite, split, seed: its first task's prompt is what the agent is given


@dataclass(frozen=True)
class FirstPrompt:
    """An agent's first prompt on a model: ``tokens`` long, against the model's ``context`` positions
    (``None`` when its config does not say); ``cached`` when read from the cache, not measured now."""

    scaffold: str
    tokens: int
    context: int | None
    model: str
    agent_version: str
    measured_at: float
    cached: bool = False

    @property
    def fits(self) -> bool | None:
        return None if self.context is None else self.tokens < self.context


def cache_path() -> Path:
    return forge_home() / "cache" / CACHE_FILE


def model_digest(model_path: Path) -> str:
    """What a prompt's length depends on in a model folder: its tokenizer and chat template files."""
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        file = model_path / name
        if file.is_file():
            digest.update(name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _context(model_path: Path) -> int | None:
    try:
        value = json.loads((model_path / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) else None


def cached_first_prompt(config: Any, name: str) -> FirstPrompt | None:
    """The cached measurement for scaffold ``name`` on ``config``'s model, if there is one for what is
    installed now (a ForgeError when the agent is not installed or not black-box)."""
    key, _, _ = _key(config, name)
    entry = _read_cache().get(key)
    return FirstPrompt(**{**entry, "cached": True}) if entry else None


def first_prompt_length(config: Any, name: str, *, refresh: bool = False, timeout_s: float = 300.0) -> FirstPrompt:
    """The length in tokens of black-box scaffold ``name``'s first prompt on ``config``'s model: from
    the cache, or (``refresh``, or nothing cached) measured by launching the agent once (see the
    module's docstring). A ForgeError when the agent is not installed or sends no request in time."""
    key, install, model_path = _key(config, name)
    if not refresh and (entry := _read_cache().get(key)):
        return FirstPrompt(**{**entry, "cached": True})
    tokens = asyncio.run(_measure(config, name, install, model_path, timeout_s))
    result = FirstPrompt(scaffold=name, tokens=tokens, context=_context(model_path), model=str(model_path),
                         agent_version=install.version, measured_at=time.time())
    cache = _read_cache()
    cache[key] = {k: v for k, v in asdict(result).items() if k != "cached"}
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cache, indent=1, sort_keys=True))
    tmp.replace(path)
    return result


def _key(config: Any, name: str) -> tuple[str, Any, Path]:
    spec = get_registry().scaffold(name)
    install = find_install(spec)  # not black-box, or not installed: a ForgeError saying so
    model_path = resolve_model_path(config.model.path).resolve()
    return f"{name}|{install.requirement}|{install.version}|{model_digest(model_path)}", install, model_path


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


async def _measure(config: Any, name: str, install: Any, model_path: Path, timeout_s: float) -> int:
    """Launch the agent against a scripted gateway of its own; the first completion's prompt length."""
    registry = get_registry()
    suite_name, split, seed = MEASURE_TASK
    task = resolve_suite(suite_name, None, registry).make(split, 1, seed)[0]
    spec = registry.scaffold(name)
    with tempfile.TemporaryDirectory(prefix="forge-first-prompt-") as tmp:
        measuring = config.model_copy(update={
            "run": config.run.model_copy(update={"dir": Path(tmp) / "runs"}),
            "gateway": config.gateway.model_copy(update={"host": "127.0.0.1", "port": 0, "auth": "loopback",
                                                         "socket": ""}),
        })
        engine = ScriptedEngine(model_path, FilePolicy({"turns": ["Done."]}))
        async with serve_gateway(measuring, "measure", engine=engine) as gw:
            key = "forge-measure-" + hashlib.sha256(str(time.time()).encode()).hexdigest()[:16]
            run = asyncio.create_task(run_blackbox(spec, base_url=f"{gw.url}/v1", api_key=key, model=gw.model_name,
                                                   task=task, workdir=Path(tmp) / "work", timeout_s=timeout_s))
            try:
                while not run.done():
                    lengths = _recorded(gw.pool)
                    if lengths:
                        return lengths[0]
                    await asyncio.sleep(0.1)
                lengths = _recorded(gw.pool)
                if lengths:
                    return lengths[0]
                ran = run.result()
                raise ForgeError(f"{name} sent no request to measure ({ran.status}: {ran.reason})")
            finally:
                run.cancel()  # the sandbox kills the agent's process group
                await asyncio.gather(run, return_exceptions=True)


def _recorded(pool: Any) -> list[int]:
    """The prompt lengths of the completions recorded so far, first completion first."""
    found = []
    for group in pool.groups():
        for traj in group.trajectories:
            found += [(c.started_at, len(c.prompt_ids)) for c in pool.trajectory(traj.id).completions]
    return [n for _, n in sorted(found)]
