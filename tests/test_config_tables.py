"""Config sections that are discriminated unions (one name table per concept), and config files
that are not config files."""

from __future__ import annotations

import pytest

from forge_cli.config import load_config
from forge_cli.configs.model import ROLLOUT_ENGINE_CONFIGS, HFEngineConfig, ScriptedEngineConfig, VLLMEngineConfig
from forge_cli.errors import ForgeError


def test_each_engine_is_built_from_its_own_fields(tmp_path):
    toml = tmp_path / "other.toml"
    toml.write_text('[model.engine]\ntype = "hf"\nmax_batch = 4\n')
    engine = load_config(toml, env={}).model.engine
    assert isinstance(engine, HFEngineConfig) and engine.max_batch == 4
    # the name alone is short for the table, in every layer
    assert isinstance(load_config(env={"FORGE_MODEL__ENGINE": "scripted"}).model.engine, ScriptedEngineConfig)
    assert isinstance(load_config(env={}).model.engine, VLLMEngineConfig)
    toml.write_text('[model]\nengine = "scripted"\n')
    engine = load_config(toml, env={}, overrides={"model.engine.policy": "p.json"}).model.engine
    assert (engine.type, engine.policy) == ("scripted", "p.json")


def test_a_layer_that_names_another_engine_replaces_the_table(tmp_path):
    toml = tmp_path / "other.toml"
    toml.write_text('[model.engine]\ntype = "vllm"\ngpu_memory_utilization = 0.3\n')
    engine = load_config(toml, env={}, overrides={"model.engine.type": "hf"}).model.engine
    assert engine == HFEngineConfig()  # vLLM's field did not leak into hf's table
    engine = load_config(toml, env={}, overrides={"model.engine.enable_prefix_caching": False}).model.engine
    assert (engine.gpu_memory_utilization, engine.enable_prefix_caching) == (0.3, False)  # same type: merged


@pytest.mark.parametrize(("overrides", "message"), [
    ({"model.engine.type": "foo"}, "command-line flag --engine: model.engine: type must be one of 'vllm', 'hf', 'scripted' (got 'foo')"),
    ({"model.engine.type": "hf", "model.engine.gpu_memory_utilization": 0.3},
     "command-line flag --set model.engine.gpu_memory_utilization: model.engine.gpu_memory_utilization: unknown key for type = 'hf'"),
    ({"model.engine.type": "hf", "model.engine.max_batch": 0},
     "command-line flag --set model.engine.max_batch: model.engine.max_batch: Input should be greater than or equal to 1 (got 0)"),
])
def test_engine_errors_name_the_flag_and_the_field(overrides, message):
    with pytest.raises(ForgeError) as err:
        load_config(env={}, overrides=overrides, flag_names={"model.engine.type": "--engine"})
    assert str(err.value) == message


def test_the_union_is_the_name_table():
    """Every engine named in the config builds; no other list of engine names exists."""
    assert set(ROLLOUT_ENGINE_CONFIGS) == {"vllm", "hf", "scripted"}
    for name, cls in ROLLOUT_ENGINE_CONFIGS.items():
        assert cls().type == name


def test_config_names_and_implementation_tables_agree():
    """Each name a config section accepts selects an implementation, and each implementation has a
    name the config accepts: the configuration layer's tables and the code's are the same lists."""
    from forge_cli.configs.model import ROUTING_POLICIES
    from forge_cli.configs.pool import SCHEDULER_CONFIGS
    from forge_cli.configs.rollout import EXECUTOR_NAMES
    from forge_cli.configs.train import LOSS_CONFIGS, TRAIN_ENGINE_CONFIGS
    from forge_cli.engine import ROLLOUT_ENGINES
    from forge_cli.engine.router import ROUTERS
    from forge_cli.pool.scheduler import SCHEDULERS
    from forge_cli.rollout.executors import EXECUTORS
    from forge_cli.train.engines import TRAIN_ENGINES
    from forge_cli.train.loss import LOSSES

    assert list(ROLLOUT_ENGINE_CONFIGS) == list(ROLLOUT_ENGINES)
    assert list(ROUTING_POLICIES) == list(ROUTERS)
    assert list(SCHEDULER_CONFIGS) == list(SCHEDULERS)
    assert list(EXECUTOR_NAMES) == list(EXECUTORS)
    assert list(LOSS_CONFIGS) == list(LOSSES)
    assert list(TRAIN_ENGINE_CONFIGS) == list(TRAIN_ENGINES)


def test_context_policy_names_and_kinds_agree_with_their_code():
    """The contracts layer validates a scaffold's policy by name and kind; the rollout layer's table
    holds the same names, each for the same kind of scaffold."""
    from forge_cli.rollout.context import CONTEXT_POLICIES
    from forge_cli.specs import CONTEXT_POLICY_ALIASES, CONTEXT_POLICY_KINDS

    assert {name: policy.kind for name, policy in CONTEXT_POLICIES.items()} == CONTEXT_POLICY_KINDS
    assert set(CONTEXT_POLICY_ALIASES.values()) <= set(CONTEXT_POLICIES)


def test_the_scripted_engine_without_a_policy_is_a_clear_error(tiny_model):
    from forge_cli.engine import make_engine

    with pytest.raises(ForgeError, match="needs a policy"):
        make_engine(ScriptedEngineConfig(), tiny_model)
    with pytest.raises(ForgeError, match="unknown engine 'nope'"):
        make_engine("nope", tiny_model)


def test_max_model_len_reaches_every_engine(tiny_model, tmp_path):
    """One limit, one place: ``model.max_model_len`` is what each engine enforces."""
    import json

    from forge_cli.engine import make_engine

    policy = tmp_path / "p.json"
    policy.write_text(json.dumps({"turns": ["x"]}))
    for config in (HFEngineConfig(), ScriptedEngineConfig(policy=str(policy))):
        engine = make_engine(config, tiny_model, max_model_len=77)
        assert engine.max_model_len == 77


def test_a_config_that_is_not_text_is_one_line(tmp_path):
    bad = tmp_path / "forge.toml"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    with pytest.raises(ForgeError) as err:
        load_config(bad, env={})
    assert "\n" not in str(err.value) and "not UTF-8" in str(err.value) and str(bad) in str(err.value)


def test_a_config_path_that_is_a_folder_says_so(tmp_path):
    with pytest.raises(ForgeError, match="is a folder"):
        load_config(tmp_path, env={})


def test_the_cli_prints_bad_config_files_as_one_red_line(cli, tmp_path):
    (tmp_path / "forge.toml").write_bytes(bytes(range(256)))
    result = cli("config", "show")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1 and result.stderr.startswith("Error: ")
    result = cli("--config", ".", "config", "show")
    assert result.exit_code == 1 and "is a folder" in result.stderr


def test_every_union_section_is_its_own_name_table():
    """Loss, scheduler and train engine: the config's members are the names the code dispatches on."""
    from forge_cli.configs.pool import SCHEDULER_CONFIGS
    from forge_cli.configs.train import LOSS_CONFIGS, TRAIN_ENGINE_CONFIGS
    from forge_cli.pool.scheduler import Scheduler
    from forge_cli.train import loss
    from forge_cli.train.loss import loss_function

    for name in LOSS_CONFIGS:
        cfg = load_config(env={}, overrides={"train.loss": name}).train.loss
        assert cfg.type == name and loss_function(cfg) is getattr(loss, {"grpo": "ppo_clip"}.get(name, name))
    for name in SCHEDULER_CONFIGS:
        pool = load_config(env={}, overrides={"pool.scheduler": name, "pool.max_active_groups": 10}).pool
        assert Scheduler.from_config(pool, 5).window == {"fifo": 1, "greedy": None, "windowed_fifo": 3, "bounded_staleness": None,
                                                         "staleness_cap": None}[name]
    for name in TRAIN_ENGINE_CONFIGS:
        assert load_config(env={}, overrides={"train.engine": name}).train.engine.type == name
    engine = load_config(env={}, overrides={"train.engine.type": "deepspeed", "train.engine.zero_stage": 3}).train.engine
    assert engine.zero_stage == 3
    default = load_config(env={}).train.engine  # DeepSpeed is the default, ZeRO-1
    assert (default.type, default.zero_stage) == ("deepspeed", 1)
    assert load_config(env={}, overrides={"train.engine.zero_stage": 2}).train.engine.zero_stage == 2
    with pytest.raises(ForgeError, match="train.engine.zero_stage: unknown key for type = 'torch'"):
        load_config(env={}, overrides={"train.engine.type": "torch", "train.engine.zero_stage": 3})
    with pytest.raises(ForgeError, match="pool.window_fraction: unknown key"):  # it is windowed_fifo's own field now
        load_config(env={}, overrides={"pool.window_fraction": 0.5})


def test_attention_and_split_names_come_from_the_trainer_table():
    from forge_cli.configs.train import ATTENTION_MODES, SPLITS

    for name in ATTENTION_MODES:
        assert load_config(env={}, overrides={"train.attention": name}).train.attention == name
    for name in SPLITS:
        assert load_config(env={}, overrides={"train.split": name}).train.split == name
    with pytest.raises(ForgeError, match="train.attention: Input should be 'auto', 'tree', 'flex' or 'dense'"):
        load_config(env={}, overrides={"train.attention": "sparse"})


def test_the_shipped_forge_toml_gives_way_to_a_layer_that_names_another_type(tmp_path):
    """forge.toml's [pool.scheduler] names no type but sets window_fraction: it is windowed_fifo's,
    and choosing fifo or greedy elsewhere replaces it rather than failing on it."""
    import shutil

    from tests.conftest import ROOT

    shutil.copy(ROOT / "forge.toml", tmp_path / "forge.toml")
    assert load_config(env={}).pool.scheduler.window_fraction == 0.3
    assert load_config(env={}, overrides={"pool.scheduler.type": "fifo"}).pool.scheduler.type == "fifo"
    assert load_config(env={"FORGE_POOL__SCHEDULER": "greedy"}).pool.scheduler.type == "greedy"
    (tmp_path / "forge.toml").write_text("[model.engine]\ngpu_memory_utilization = 0.4\n")
    assert load_config(env={}, overrides={"model.engine.type": "hf"}).model.engine == HFEngineConfig()
    # a variable or flag without a type adds to the table below it
    engine = load_config(env={"FORGE_MODEL__ENGINE__KV_CACHE_BYTES": "4096"}).model.engine
    assert (engine.type, engine.gpu_memory_utilization, engine.kv_cache_bytes) == ("vllm", 0.4, 4096)


def test_a_run_saved_by_an_older_forge_still_reads(tmp_path):
    """config.json from before the union sections: bare names, and window_fraction on [pool]."""
    import json

    from forge_cli.runs import run_config

    saved = json.loads(load_config(env={}).to_json())
    saved["model"]["engine"], saved["train"]["engine"], saved["train"]["loss"] = "hf", "torch", {"type": "cispo"}
    saved["pool"] = {**{k: v for k, v in saved["pool"].items() if k != "scheduler"}, "scheduler": "windowed_fifo",
                     "window_fraction": 0.5}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    old = run_config(None, tmp_path)
    assert old.pool.scheduler.window_fraction == 0.5 and old.model.engine.type == "hf"
    saved["pool"]["scheduler"] = "greedy"
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert run_config(None, tmp_path).pool.scheduler.type == "greedy"
