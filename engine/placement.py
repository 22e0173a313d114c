"""From a RunConfig to the actors of one start: backend options, actor shapes, placement.

What each LLM spec's actors need is resolved here, in the driver, before any run directory
exists (a missing model is reported early); Ray itself is only touched in `actors/`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from actors.llm import backend_of, parse_spec
from actors.workers import Placement, PoolPlan, Workers
from common.errors import UserError
from engine.config import RunConfig


def llm_options(config: RunConfig) -> dict[str, dict[str, Any]]:
    """Backend options per distinct spec of `--llm`."""
    return {spec: spec_options(config, spec) for spec in config.routes.specs}


def spec_options(config: RunConfig, spec: str) -> dict[str, Any]:
    kind, arg = parse_spec(spec)
    if kind == "vllm":
        return {"tensor_parallel_size": config.tp, "seed": config.seed,
                "engine_args": dict(config.vllm_args or {})}
    if kind == "openai":
        # Read here, on the driver: remote LLM nodes do not share the driver's environment.
        # The backend gives up on a request before the loop's llm_timeout gives up on it.
        deadline = 0.9 * config.llm_timeout
        return {"api_key": os.environ.get("OPENAI_API_KEY") or None, "deadline": deadline,
                "timeout": min(300.0, deadline), "concurrency": llm_concurrency(config, spec)}
    if kind != "llama":
        return {}
    from actors.model_assets import embedded_model_path

    path = arg or str(embedded_model_path())
    if not Path(path).is_file():
        raise UserError(f"model file {path} not found; pass --llm llama:/path/to/model.gguf")
    # llama.cpp threads spin at every barrier: one preempted by a candidate stalls them all
    # (measured: LightGBM beside a 2-thread llama on 2 cores went from 1.4 s to 64 s, and the
    # LLM call from 13 s to 70 s). So the LLM gets the cores the executors leave free.
    threads = max(1, (os.cpu_count() or 2) - config.executor_count)
    # Without a path the actor finds (or assembles) the default model on its own node: a
    # remote LLM node shares no disk with the driver.
    options: dict[str, Any] = {"seed": config.seed, "n_threads": threads}
    if arg:
        options["model_path"] = arg
    return options


def llm_concurrency(config: RunConfig, spec: str) -> int:
    return config.llm_concurrency or backend_of(spec).concurrency


def llm_placement(config: RunConfig, spec: str) -> Placement:
    """Ray resources of one LLM actor of `spec`: vLLM gets its GPUs (tp unless --llm-gpus)."""
    gpus = 0.0
    if backend_of(spec).gpus:
        gpus = float(config.tp if config.llm_gpus is None else config.llm_gpus)
    resources = {config.llm_resource: 1.0} if config.llm_resource else {}
    return Placement(num_cpus=1.0, gpus=gpus, resources=resources)


def executor_placement(config: RunConfig) -> Placement:
    resources = {config.executor_resource: 1.0} if config.executor_resource else {}
    return Placement(num_cpus=1.0, gpus=config.executor_gpus, resources=resources)


def start_workers(config: RunConfig, options: dict[str, dict[str, Any]]) -> Workers:
    """Start every LLM pool and executor of `config` on the connected Ray (`--llm none`: the
    executors alone)."""
    plans = [
        PoolPlan(spec, options[spec], llm_concurrency(config, spec),
                 llm_placement(config, spec), config.llm_replicas)
        for spec in config.routes.specs
    ]
    # The embedded model holds a CPU of the machine the executors share, idle between its
    # requests: a spare executor runs there at the lowest priority (actors/workers.py).
    embedded = any(parse_spec(spec)[0] == "llama" for spec in config.routes.specs)
    return Workers.start(plans, config.executor_count, executor_placement(config),
                         spares=embedded)
