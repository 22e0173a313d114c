"""The embedded LLM: llama.cpp (llama-cpp-python) running a GGUF model in this process.

The default model is Qwen2.5-Coder-1.5B-Instruct Q4_K_M, assembled from its PyPI parts by
`actors.model_assets`. Every prompt of a task shares a long byte-identical prefix, and
llama-cpp-python keeps the KV cache of the previous call and re-evaluates only the tokens
after the longest common prefix, so calls after the first skip most of the prompt work.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from actors.model_assets import MODEL_NAME, embedded_model_path
from actors.name_guard import NameGuard, ReadGuard, TokenIndex, WriteGuard
from common.chat import ChatPrompt, Reply
from common.errors import BackendError

MIN_MAX_TOKENS = 256  # below this a reply cannot hold a useful script: fail instead of truncating
# The chat template adds role markers around each message (Qwen: `<|im_start|>role\n` ...
# `<|im_end|>\n`, 5 tokens), a default system message when none is given (~20 tokens) and the
# assistant header; these bounds over-count slightly, which only costs a few reply tokens.
_TEMPLATE_TOKENS_PER_MESSAGE = 8
_TEMPLATE_TOKENS_FIXED = 32
# Guards kept for later replies, of each kind (each remembers what it banned after each
# partial name): a run's prompts share one target and a few chains of columns, and the
# computations tried on a feature set stay the same until its next program is scored.
_GUARDS_KEPT = 8


def _keep_newest(cache: dict[Any, Any]) -> None:
    """Drop all but the _GUARDS_KEPT newest guards: each prompt's names make their own."""
    for key in list(cache)[:-_GUARDS_KEPT]:
        del cache[key]


class LlamaLLM:
    """`generate(prompts) -> replies` on a local GGUF model; prompts run one after another.

    `cache_bytes` bounds an in-RAM store of saved KV states (0 turns it off). It decodes
    plainly: prompt-lookup speculative decoding was twice as slow on 2 cores
    (benchmarks/results/decoding-2026-11-25).

    Use as a context manager, or call `close()`, to free the model's memory promptly.
    """

    def __init__(
        self,
        model_path: str | None = None,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        seed: int = 0,
        verbose: bool = False,
        cache_bytes: int = 1 << 30,
    ) -> None:
        try:
            import llama_cpp
        except ImportError as exc:
            raise BackendError(
                "the embedded LLM needs the 'local' extra: pip install -e '.[local]'"
            ) from exc
        unsafe = amx_build_on_amx_cpu(llama_cpp.llama_print_system_info().decode(),
                                      _cpu_flags())
        if unsafe:
            raise BackendError(unsafe)
        if model_path:
            path = Path(model_path).expanduser()
            if not path.is_file():
                raise BackendError(
                    f"model file {path} not found; pass --llm llama:/path/model.gguf"
                )
            self.model = path.stem
        else:
            path = embedded_model_path()
            self.model = MODEL_NAME
        # llama.cpp defaults to half the cores; on CPU all of them was measurably faster.
        threads = n_threads or os.cpu_count() or 1
        self.n_ctx = n_ctx
        start = time.perf_counter()
        try:
            self._llama: Any = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                seed=seed,
                verbose=verbose,
            )
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"llama.cpp could not load {path}: {exc}") from exc
        if cache_bytes > 0:
            # The live KV cache only serves the previous call's prefix. When prompts of two
            # tasks (or two long parents) alternate, saved states (~30 KB per token, ~60 MB
            # for a 2k-token prompt) bring a prefix back for ~0.1 s instead of re-evaluating it
            # (measured: 2 s instead of 16-30 s per call on 2 cores).
            self._llama.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=cache_bytes))
        self.load_seconds = time.perf_counter() - start
        # The model's own chat template, rendered here for a reply that starts with given
        # text (ChatPrompt.reply_start); a model without one writes whole replies.
        template = self._llama.metadata.get("tokenizer.chat_template")
        self._template: Any = None
        if template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            def token_text(token: int) -> str:
                return self._llama.detokenize([token], special=True).decode(errors="replace") \
                    if token >= 0 else ""

            self._template = Jinja2ChatFormatter(
                template=template, eos_token=token_text(self._llama.token_eos()),
                bos_token=token_text(self._llama.token_bos()))
        # One Llama context is not thread-safe (one KV cache, one sampler); serialise callers.
        self._lock = threading.Lock()
        self._vocabulary: list[str] = []  # each token's text, read on the first guarded reply
        self._guards: dict[tuple[tuple[str, ...], tuple[str, ...]], NameGuard] = {}
        self._statement_guards: dict[tuple[tuple[str, ...], ...],
                                     tuple[ReadGuard, WriteGuard]] = {}
        self._tokens: TokenIndex | None = None  # the vocabulary by text, for the read guards

    def generate(self, prompts: list[ChatPrompt]) -> list[Reply]:
        with self._lock:
            return [self._complete(prompt) for prompt in prompts]

    def _complete(self, prompt: ChatPrompt) -> Reply:
        if self._llama is None:
            raise BackendError("the embedded LLM was closed")
        start_text = prompt.reply_start if self._template is not None else ""
        start = time.perf_counter()
        try:
            # A continued reply's prompt is rendered and tokenized here, so its length is
            # exact; a chat prompt's is estimated, since llama.cpp renders it inside the call.
            continued = self._continued(prompt.messages, start_text) if start_text else []
            max_tokens = fit_max_tokens(
                len(continued) if start_text else self._estimate_prompt_tokens(prompt),
                prompt.max_tokens, self.n_ctx)
            # temperature 0 selects llama.cpp's greedy sampler: such replies are exact repeats.
            # A model without a chat template writes the whole reply: the stop strings, meant
            # for what follows the start, are not its (ChatPrompt.stop).
            stop = prompt.stop if start_text or not prompt.reply_start else []
            sampling: dict[str, Any] = {"max_tokens": max_tokens, "seed": prompt.seed,
                                        "temperature": prompt.temperature,
                                        "stop": stop or None}
            if start_text:
                if prompt.never_names or prompt.column_names:
                    sampling["logits_processor"] = self._name_guard(prompt, len(continued))
                response = self._llama.create_completion(prompt=continued, **sampling)
            else:
                if prompt.json_schema is not None:  # decoding constrained by a grammar
                    sampling["response_format"] = {"type": "json_object",
                                                   "schema": prompt.json_schema}
                response = self._llama.create_chat_completion(messages=prompt.messages,
                                                              **sampling)
        except (ValueError, RuntimeError) as exc:
            what = prompt.tag or "chat"
            raise BackendError(f"llama.cpp failed on a {what} prompt: {exc}") from exc
        seconds = time.perf_counter() - start
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        text = start_text + (choice.get("text") or "") if start_text \
            else choice["message"].get("content") or ""
        return Reply(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            seconds=seconds,
            model=self.model,
            finish_reason=choice.get("finish_reason") or "stop",
        )

    def _name_guard(self, prompt: ChatPrompt, prompt_tokens: int) -> Any:
        """A logits processor that masks the tokens spelling one of the prompt's never-names
        inside a column's name, those making a column read one the rows do not have, a
        computation already tried again or arithmetic on text, and those assigning a kept
        program's column again (actors.name_guard), reading what the reply has written."""
        from llama_cpp import LogitsProcessorList

        if not self._vocabulary:  # 151,000 tokens for Qwen2.5: about a second, once
            self._vocabulary = [self._llama.detokenize([t]).decode(errors="ignore")
                                for t in range(self._llama.n_vocab())]
        names = (prompt.never_names, prompt.column_names)
        if names not in self._guards:
            self._guards[names] = NameGuard(self._vocabulary, *names)
        statements = (prompt.never_computations, prompt.column_names, prompt.text_names,
                      prompt.kept_names)
        if statements not in self._statement_guards:
            if self._tokens is None:
                self._tokens = TokenIndex(self._vocabulary)
            self._statement_guards[statements] = (
                ReadGuard(self._tokens, prompt.never_computations, prompt.column_names,
                          prompt.text_names),
                WriteGuard(self._tokens, prompt.kept_names))
        reads, writes = self._statement_guards[statements]
        guards = [self._guards[names].banned, reads.banned, writes.banned]
        _keep_newest(self._guards)
        _keep_newest(self._statement_guards)
        start = prompt.reply_start

        def mask(input_ids: Any, scores: Any) -> Any:
            written = start + self._llama.detokenize(
                list(input_ids[prompt_tokens:])).decode(errors="ignore")
            for guard in guards:
                banned = guard(written)
                if banned:
                    scores[banned] = -float("inf")
            return scores

        return LogitsProcessorList([mask])

    def _continued(self, messages: list[dict[str, str]], reply_start: str) -> list[int]:
        """The prompt's tokens as the chat completion renders them (the same template, so
        the prefix cache serves both), then the start of the assistant's reply."""
        rendered = self._template(messages=messages).prompt + reply_start
        return list(self._llama.tokenize(rendered.encode(), add_bos=False, special=True))

    def _estimate_prompt_tokens(self, prompt: ChatPrompt) -> int:
        """Tokens of the templated prompt, counted from the contents plus a template bound."""
        content = sum(
            len(self._llama.tokenize(m["content"].encode(), add_bos=False, special=True))
            for m in prompt.messages
        )
        template = _TEMPLATE_TOKENS_PER_MESSAGE * len(prompt.messages) + _TEMPLATE_TOKENS_FIXED
        return content + template

    def close(self) -> None:
        """Free the model and its KV cache now rather than at garbage collection."""
        llama, self._llama = self._llama, None
        if llama is not None:
            llama.close()

    def __enter__(self) -> LlamaLLM:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _cpu_flags() -> str:
    """The CPU's `flags` line of /proc/cpuinfo; empty where there is none (not Linux: no AMX
    check)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line for line in lines if line.startswith("flags")), "")


def amx_build_on_amx_cpu(system_info: str, cpu_flags: str) -> str | None:
    """Why this llama.cpp build must not run here, or None: one built with AMX kernels
    (`AMX_INT8 = 1` in its system info) on a CPU that has AMX crashes the process at the first
    decode of a Q4_K model (a segmentation fault, no message; ggml-org/llama.cpp#20824), so
    refuse it in one line instead. setup.sh builds it without them (llama-build.sh)."""
    if "AMX_INT8 = 1" not in system_info or "amx_int8" not in cpu_flags.split():
        return None
    return ("this llama-cpp-python was built with AMX kernels, which crash on this CPU:"
            " rebuild it as setup.sh does (bash setup.sh local, after"
            " pip cache remove llama_cpp_python)")


def fit_max_tokens(prompt_tokens: int, max_tokens: int, n_ctx: int,
                   setting: str = "n_ctx") -> int:
    """Shrink the reply budget so prompt + reply fit the context; fail below MIN_MAX_TOKENS.
    `setting` names what the user raises for a longer context."""
    room = n_ctx - prompt_tokens
    if max_tokens <= room:
        return max_tokens
    floor = min(max_tokens, MIN_MAX_TOKENS)
    if room >= floor:
        return room
    raise BackendError(
        f"prompt of ~{prompt_tokens} tokens leaves {max(room, 0)} of the {n_ctx}-token context "
        f"for the reply (need at least {floor}); shorten the prompt or raise {setting}"
    )
