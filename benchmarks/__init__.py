"""Benchmarks: speed and quality goals, measured, never timed tests (benchmarks/README.md).

- `run`, `report`, `table`, `gain`, `figures`: the suite runner (policies, baselines and the
  floor arm per task, fold and seed), its results table and its report.
- `datasets`, `cli`: the shipped datasets and suites, the flags the tools share.
- `baselines`: the non-LLM baselines a practitioner would run instead.
- `memory`: the solution memory's arms, paired.
- `latency`: an answer's prediction time (CLI, API, HTTP, AutoGluon).
- `scaling`, `rebuild`, `spread`, `tiny_model`, `vllm_gpu`: throughput and scaling.
- `gpu_sandbox`: whether a candidate gets the GPU inside the sandbox (run on a GPU machine).
- `stats`: Wilson intervals, the exact sign test, paired bootstrap intervals.
"""

__all__ = ["baselines", "cli", "datasets", "figures", "gain", "gpu_sandbox", "latency", "memory",
           "rebuild", "report", "run", "scaling", "spread", "stats", "table", "tiny_model",
           "vllm_gpu"]
