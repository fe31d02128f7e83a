"""examples/scale/*.toml (docs/scaling.md): every example loads through forge.toml's loader with every
key it writes kept, and each runs here where it can — the DeepSpeed example on 2 processes, the Ray
example's rollout on a local Ray, the PostgreSQL example's rollout into a throwaway PostgreSQL."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import pytest

from tests.conftest import ROOT
from tests.test_train_distributed import launch

EXAMPLES = sorted((ROOT / "examples" / "scale").glob("*.toml"))


def _leaves(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield prefix + key, value


def test_there_is_an_example_per_setting():
    assert {p.stem for p in EXAMPLES} >= {"gpu-single", "gpu-multinode", "ray-cluster", "postgres-pool"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_loads_with_every_key_kept(path):
    from forge_cli.config import load_config

    config = json.loads(load_config(path, env={}).to_json())
    for dotted, want in _leaves(tomllib.loads(path.read_text())):
        got = config
        for part in dotted.split("."):
            got = got[part]
        assert got == want, f"{path.name}: {dotted}"


def _rollout(cli, tiny_model, example, run, *sets):
    """``forge rollout`` with an example's config, on the scripted engine (every id and logprob real)."""
    return cli("--config", str(example), "--set", "gateway.port=0", "--set", "gateway.host=127.0.0.1",
               "--set", "gateway.auth=auto", *sets, "rollout", "--scaffold", "tool-call", "--task", "calc", "--groups",
               "2", "--n", "2", "--run", run, "--model", str(tiny_model), "--engine", "scripted", "--policy",
               "forge_cli.tasks.demo_policies:calc")


def test_the_postgres_example_records_into_postgres(cli, tiny_model, pg_url):
    example = ROOT / "examples" / "scale" / "postgres-pool.toml"
    url = f"pool.url={json.dumps(pg_url)}"
    done = _rollout(cli, tiny_model, example, "pg-run", "--set", url)
    assert done.exit_code == 0, done.stderr
    assert not (Path.cwd() / "runs" / "pg-run" / "pool.sqlite").exists()
    data = json.loads(cli("--config", str(example), "--set", url, "pool", "stats", "pg-run", "--json").stdout)
    assert data["trajectories"]["completed"] == 4


@pytest.mark.slow
def test_the_ray_example_runs_on_a_local_ray(cli, tiny_model, monkeypatch, tmp_path):
    """Without its ray_address (no key can be set to none), so the driver starts a local Ray."""
    monkeypatch.setenv("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    text = (ROOT / "examples" / "scale" / "ray-cluster.toml").read_text()
    example = tmp_path / "ray-local.toml"
    example.write_text("\n".join(line for line in text.splitlines() if not line.startswith("ray_address")))
    assert tomllib.loads(example.read_text())["rollout"]["executor"] == "ray"
    done = _rollout(cli, tiny_model, example, "ray-run")
    assert done.exit_code == 0, done.stderr
    data = json.loads(cli("pool", "stats", "ray-run", "--json").stdout)
    assert data["trajectories"]["completed"] == 4


@pytest.mark.slow
def test_the_multinode_example_trains_on_two_processes(tmp_path):
    """Its [train] (DeepSpeed ZeRO-3) on 2 ranks: the same weights on both after every step."""
    ranks = launch(str(ROOT / "examples" / "scale" / "gpu-multinode.toml"), random.randrange(10**6), tmp_path / "out", 2)
    assert len(ranks[0]["hashes"]) == 3 and ranks[1]["hashes"] == ranks[0]["hashes"]
    assert ranks[1]["steps"] == 3


def test_engine_args_reach_vllm_checked_against_its_fields():
    """What [model.engine] engine_args passes to vLLM's AsyncEngineArgs (the engine itself is not started)."""
    from vllm.config import KVTransferConfig
    from vllm.engine.arg_utils import AsyncEngineArgs

    from forge_cli.engine.vllm import vllm_engine_args
    from forge_cli.errors import ForgeError

    forge_set = {"model": "m", "logprobs_mode": "processed_logprobs", "max_model_len": 128}
    speculative = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    got = vllm_engine_args({"speculative_config": speculative, "tensor_parallel_size": 2,
                            "kv_transfer_config": {"kv_connector": "NixlConnector", "kv_role": "kv_both"}}, forge_set)
    assert got["speculative_config"] == speculative and got["tensor_parallel_size"] == 2
    assert isinstance(got["kv_transfer_config"], KVTransferConfig) and got["kv_transfer_config"].kv_role == "kv_both"
    args = AsyncEngineArgs(**forge_set, **got)  # what VLLMEngine builds its AsyncLLM from
    assert args.speculative_config == speculative and args.tensor_parallel_size == 2
    with pytest.raises(ForgeError, match="'speculative' is not one of vLLM's engine arguments"):
        vllm_engine_args({"speculative": speculative}, forge_set)
    with pytest.raises(ForgeError, match="'logprobs_mode' is set by Forge"):
        vllm_engine_args({"logprobs_mode": "raw_logprobs"}, forge_set)
    with pytest.raises(ForgeError, match="kv_transfer_config"):
        vllm_engine_args({"kv_transfer_config": {"kv_role": "sideways"}}, forge_set)
