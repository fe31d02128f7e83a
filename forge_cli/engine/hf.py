"""The ``hf`` engine: transformers on CPU or GPU, batching the requests that arrive together.

A worker thread takes every queued request (up to ``max_batch`` sequences), left-pads them into
one batch and decodes step by step with a KV cache, sampling each row with its own temperature,
top-p and seed; a streamed request gets each new id as it is sampled. A request whose rows fail
(anything its own sampling raises) fails alone: the other requests of the batch go on. A row ends
at the first step whose text holds a stop string, reporting the earliest one in it. For machines
without vLLM, and for fast tests.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from pathlib import Path
from typing import Any

from forge_cli.engine.base import Engine, GenerationOutput, SamplingParams, context_limit, first_stop
from forge_cli.engine.weights import load_into
from forge_cli.errors import ForgeError


def load_hf(model_path: str | Path, device: str = "cpu", dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) from a local Hugging Face folder, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, dtype), attn_implementation="sdpa")
    except (OSError, ValueError) as exc:
        raise ForgeError(f"cannot load a Hugging Face model from {model_path}: {exc}") from None
    model.to(device).eval()
    return model, tokenizer


def token_logprobs(model: Any, prompt_ids: list[int], output_ids: list[int], temperature: float) -> list[float]:
    """log_softmax(logits / T) of each output id given everything before it (one forward pass)."""
    return score(model, prompt_ids, output_ids, temperature)[0]


def score(model: Any, prompt_ids: list[int], output_ids: list[int], temperature: float,
          top: int = 0) -> tuple[list[float], list[list[tuple[int, float]]] | None]:
    """:func:`token_logprobs`, and with ``top = k`` each position's k most likely (id, logprob)."""
    import torch

    ids = torch.tensor([prompt_ids + output_ids], device=model.device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    t = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits / t, dim=-1)  # [n_out, V]
    chosen = logp.gather(-1, torch.tensor(output_ids, device=logp.device)[:, None])[:, 0].tolist()
    return chosen, (top_k(logp, top) if top else None)


def top_k(logp: Any, k: int) -> Any:
    """The ``k`` most likely (id, logprob) of ``[V]`` logprobs, most likely first; of ``[n, V]``, that
    per row."""
    values, ids = logp.topk(k, dim=-1)
    if logp.dim() == 1:
        return list(zip(ids.tolist(), values.tolist()))
    return [list(zip(i, v)) for i, v in zip(ids.tolist(), values.tolist())]


class _Job:
    def __init__(self, prompt_ids: list[int], params: SamplingParams, loop: asyncio.AbstractEventLoop,
                 stream: bool = False) -> None:
        self.prompt_ids = prompt_ids
        self.params = params
        self.loop = loop
        self.future: asyncio.Future = loop.create_future()
        # streamed: each sampled id, put from the worker thread (before the future resolves)
        self.ids: asyncio.Queue[int] | None = asyncio.Queue() if stream else None
        self.abandoned = False  # its caller went away: the worker stops sampling its rows

    def emit(self, token: int) -> None:
        if self.ids is not None:
            self.loop.call_soon_threadsafe(self.ids.put_nowait, token)


class HFEngine(Engine):
    name = "hf"

    def __init__(self, model_path: str | Path, *, device: str = "cpu", max_batch: int = 32, max_model_len: int | None = None) -> None:
        self.model, self.tokenizer = load_hf(model_path, device)
        super().__init__(context_limit(max_model_len, getattr(self.model.config, "max_position_embeddings", None)))
        self.eos_token_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.max_batch = max_batch
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._lock = threading.Lock()  # held while a batch runs or weights load
        self._worker = threading.Thread(target=self._work, name="forge-hf-engine", daemon=True)
        self._worker.start()

    async def _generate(self, prompt_ids, params, context):
        job = _Job(list(prompt_ids), params, asyncio.get_running_loop())
        self._jobs.put(job)
        try:
            return await asyncio.shield(job.future)
        finally:
            job.abandoned = not job.future.done()

    async def _generate_stream(self, prompt_ids, params, context):
        job = _Job(list(prompt_ids), params, asyncio.get_running_loop(), stream=True)
        self._jobs.put(job)
        nxt = None
        try:
            while True:
                nxt = asyncio.ensure_future(job.ids.get())
                await asyncio.wait({nxt, job.future}, return_when=asyncio.FIRST_COMPLETED)
                if not nxt.done():  # finished: the ids still queued came before the result
                    rest = [job.ids.get_nowait() for _ in range(job.ids.qsize())]
                    if rest:
                        yield rest
                    [out] = job.future.result()  # raises what the batch raised
                    yield out
                    return
                yield [nxt.result(), *(job.ids.get_nowait() for _ in range(job.ids.qsize()))]
        finally:  # also when the client disconnects mid-stream (the generator is closed)
            if nxt is not None:
                nxt.cancel()
            job.abandoned = not job.future.done()

    async def _load_weights(self, weights: Any) -> None:
        def load() -> None:
            with self._lock:  # never between two steps of a running batch
                load_into(self.model, weights)

        await asyncio.get_running_loop().run_in_executor(None, load)

    async def close(self) -> None:
        self._jobs.put(None)
        await asyncio.get_running_loop().run_in_executor(None, self._worker.join)

    # ---- the worker thread ---------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            jobs = [job]
            rows = job.params.n
            while rows < self.max_batch:
                try:
                    nxt = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._jobs.put(None)
                    break
                jobs.append(nxt)
                rows += nxt.params.n
            try:
                with self._lock:
                    results = self._run(jobs)
                for j, res in zip(jobs, results):
                    if isinstance(res, BaseException):
                        j.loop.call_soon_threadsafe(_resolve, j.future, None, res)
                    else:
                        j.loop.call_soon_threadsafe(_resolve, j.future, res, None)
            except Exception as exc:  # one bad batch must not kill the engine
                for j in jobs:
                    j.loop.call_soon_threadsafe(_resolve, j.future, None, exc)

    def _run(self, jobs: list[_Job]) -> list[list[GenerationOutput] | Exception]:
        """Each job's outputs, or the exception one of its rows raised (its other rows stop too)."""
        import torch

        version = self.version
        rows = [(j, k) for j in jobs for k in range(j.params.n)]
        width = max(len(j.prompt_ids) for j in jobs)
        dev = self.model.device
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long, device=dev)
        mask = torch.zeros((len(rows), width), dtype=torch.long, device=dev)
        for r, (j, _) in enumerate(rows):
            input_ids[r, width - len(j.prompt_ids):] = torch.tensor(j.prompt_ids)
            mask[r, width - len(j.prompt_ids):] = 1
        failed: dict[int, Exception] = {}  # id(job) -> what one of its rows raised
        gens = []
        for j, k in rows:
            g = torch.Generator(device="cpu")
            try:
                if j.params.seed is not None:
                    g.manual_seed(j.params.seed + k)
                else:
                    g.seed()
            except Exception as exc:
                failed.setdefault(id(j), exc)
            gens.append(g)
        outs: list[list[int]] = [[] for _ in rows]
        lps: list[list[float]] = [[] for _ in rows]
        tops: list[list[list[tuple[int, float]]]] = [[] for _ in rows]
        done: list[tuple[str, Any] | None] = [None] * len(rows)
        past = None
        step_ids = input_ids
        max_new = max(j.params.max_tokens for j in jobs)
        with torch.no_grad():
            for _ in range(max_new):
                positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -step_ids.shape[1]:]
                out = self.model(input_ids=step_ids, attention_mask=mask, position_ids=positions, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[:, -1, :].float()
                nxt = torch.full((len(rows),), self.pad_id, dtype=torch.long)
                for r, (j, _) in enumerate(rows):
                    if done[r] is None and (j.abandoned or id(j) in failed):
                        done[r] = ("abort", None)  # nobody reads this row's output
                    if done[r] is not None:
                        continue
                    try:
                        tok, lp, top = _sample(logits[r], j.params, gens[r])
                        j.emit(tok)
                        outs[r].append(tok)
                        lps[r].append(lp)
                        tops[r].append(top)
                        done[r] = self._ended(outs[r], j.params)
                    except Exception as exc:  # this request fails; the batch's others go on
                        failed.setdefault(id(j), exc)
                        done[r] = ("abort", None)
                        continue
                    nxt[r] = tok
                if all(d is not None for d in done):
                    break
                step_ids = nxt[:, None].to(dev)
                # finished rows keep feeding pad; their outputs are no longer read
                mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=dev)], dim=1)
        results: dict[int, list[GenerationOutput]] = {}
        for r, (j, _) in enumerate(rows):
            reason, why = done[r] or ("length", None)
            results.setdefault(id(j), []).append(GenerationOutput(outs[r], lps[r], reason, version, why,
                                                                  top_logprobs=tops[r] if j.params.top_logprobs else None))
        return [failed[id(j)] if id(j) in failed else results[id(j)] for j in jobs]

    def _ended(self, outs: list[int], params: SamplingParams) -> tuple[str, Any] | None:
        """Why a row whose ids so far are ``outs`` ends now: an EOS or stop id, the earliest stop
        string in its text, or max_tokens; None while it goes on."""
        if outs[-1] in {self.eos_token_id, *params.stop_token_ids} - {None}:
            return ("stop", outs[-1])
        if params.stop and (hit := first_stop(self.tokenizer.decode(outs), params.stop)):
            return ("stop", hit[1])
        if len(outs) >= params.max_tokens:
            return ("length", None)
        return None


def _sample(logits: Any, params: SamplingParams, gen: Any) -> tuple[int, float, list[tuple[int, float]]]:
    """One id, its behaviour logprob log_softmax(logits / T) (top-p only narrows the draw, and always
    keeps the most likely id), and the ``params.top_logprobs`` most likely ids under that
    distribution. ``T`` is 0 or at least MIN_TEMPERATURE (SamplingParams sees to it), so
    ``logits / T`` stays finite."""
    import torch

    if params.temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        tok = int(torch.argmax(logits))
        return tok, float(logp[tok]), top_k(logp, params.top_logprobs) if params.top_logprobs else []
    logp = torch.log_softmax(logits / params.temperature, dim=-1)
    probs = logp.exp()
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < params.top_p
        keep[0] = True  # a top_p below float32's resolution (1e-300) would keep nothing
        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
    tok = int(torch.multinomial(probs.cpu(), 1, generator=gen))
    return tok, float(logp[tok]), top_k(logp, params.top_logprobs) if params.top_logprobs else []


def _resolve(future: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
