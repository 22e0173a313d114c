"""vLLM inside an LLM actor: one async engine, many requests in flight (continuous batching).

The actor that holds it is an async Ray actor, so every `agenerate` call the loop sends while
others run joins the engine's running batch instead of waiting for them. Prefix caching is on:
every prompt of a task starts with the same long preview, so its KV blocks are computed once
and shared. `tensor_parallel_size > 1` shards the model over that many GPUs of one node: the
actor runs inside a STRICT_PACK placement group of that many GPU bundles (actors/workers.py)
and vLLM's Ray executor places its workers in that group.

Prompts are rendered with the tokenizer's own chat template and sent as token ids, so the
prompt token count is exact and the template is the model's, not a guess.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

from actors.llama_backend import fit_max_tokens
from common.chat import ChatPrompt, Reply
from common.errors import BackendError

EXTRA_HINT = "the vllm backend needs the 'vllm' extra: pip install -e '.[vllm]'"


class VllmLLM:
    """`await agenerate(prompts) -> replies` on a local vLLM engine.

    `engine_args` pass straight to vLLM's `AsyncEngineArgs` (task.yaml `vllm_args`, e.g.
    `max_model_len`, `gpu_memory_utilization`, `enforce_eager`); unknown names are an error.
    """

    def __init__(self, model: str, *, tensor_parallel_size: int = 1, seed: int = 0,
                 engine_args: dict[str, Any] | None = None) -> None:
        try:
            from vllm import AsyncEngineArgs, AsyncLLMEngine, SamplingParams
        except ImportError as exc:
            raise BackendError(EXTRA_HINT) from exc
        extra = dict(engine_args or {})
        known = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise BackendError(f"unknown vllm_args {', '.join(unknown)}; they go to vLLM's "
                               "AsyncEngineArgs (e.g. max_model_len, gpu_memory_utilization)")
        settings: dict[str, Any] = {
            "model": model,
            "tensor_parallel_size": tensor_parallel_size,
            "enable_prefix_caching": True,
            "seed": seed,
            "disable_log_stats": True,
        }
        if tensor_parallel_size > 1:
            # Workers go into the placement group this actor was started in (capture child
            # tasks): the GPUs Ray reserved for it on one node.
            settings["distributed_executor_backend"] = "ray"
        settings.update(extra)
        start = time.perf_counter()
        try:
            self.engine: Any = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**settings))
        except Exception as exc:  # vLLM raises many kinds; the actor start must say which
            text = " ".join(str(exc).split())[:300]
            raise BackendError(f"vLLM could not load {model!r}: {type(exc).__name__}: {text}"
                               ) from exc
        self.load_seconds = time.perf_counter() - start
        self.tokenizer = self.engine.get_tokenizer()
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(f"the tokenizer of {model!r} has no chat template; use an "
                               "instruct/chat model")
        self.max_model_len = int(self.engine.model_config.max_model_len)
        self.model = Path(model).name if Path(model).exists() else model
        self._sampling_params = SamplingParams
        # Prefix-cache effect, summed over replies (benchmarks read these via stats()).
        self.requests = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0

    async def agenerate(self, prompts: list[ChatPrompt]) -> list[Reply]:
        return list(await asyncio.gather(*(self._complete(p) for p in prompts)))

    async def _complete(self, prompt: ChatPrompt) -> Reply:
        text = self.tokenizer.apply_chat_template(prompt.messages, tokenize=False,
                                                  add_generation_prompt=True)
        text += prompt.reply_start  # the model continues the reply from there
        # The template already holds the special tokens: adding BOS again would double it.
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        max_tokens = fit_max_tokens(len(ids), prompt.max_tokens, self.max_model_len,
                                    "max_model_len (task.yaml vllm_args)")
        params = self._sampling_params(
            temperature=prompt.temperature, max_tokens=max_tokens, seed=prompt.seed,
            stop=prompt.stop or None,
        )
        start = time.perf_counter()
        final: Any = None
        try:
            async for output in self.engine.generate({"prompt_token_ids": ids}, params,
                                                     uuid.uuid4().hex):
                final = output
        except Exception as exc:
            what = prompt.tag or "chat"
            text = " ".join(str(exc).split())[:300]
            raise BackendError(f"vLLM failed on a {what} prompt: {type(exc).__name__}: {text}"
                               ) from exc
        if final is None or not final.outputs:
            raise BackendError("vLLM returned no output for a request")
        completion = final.outputs[0]
        self.requests += 1
        self.prompt_tokens += len(ids)
        self.cached_tokens += int(final.num_cached_tokens or 0)
        return Reply(
            text=prompt.reply_start + completion.text,
            prompt_tokens=len(ids),
            completion_tokens=len(completion.token_ids),
            seconds=time.perf_counter() - start,
            model=self.model,
            finish_reason=completion.finish_reason or "stop",
        )

    def stats(self) -> dict[str, float]:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "cached_tokens": self.cached_tokens, "load_seconds": self.load_seconds}

    def close(self) -> None:
        """Stop the engine (and its engine-core process) now."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.shutdown()

