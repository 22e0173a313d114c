"""Benchmarks: speed and quality goals, measured, never timed tests.

- `run`, `report`: the suite runner (policies and baselines per task and seed) and its report.
- `datasets`: the shipped datasets and suites.
- `baselines`: the non-LLM baselines a practitioner would run instead.
- `quality`, `reflect`, `debug_pairs`, `analysis`: measurements of selection, reflection and
  the analyst (the latter two replay the engine's own `Step`).
- `scaling`, `spread`, `slice`, `tiny_model`, `vllm_gpu`: throughput and scaling measurements.
- `gpu_sandbox`: whether a candidate gets the GPU inside the sandbox (run on a GPU machine).
- `stats`: Wilson intervals and the exact sign test.
"""

__all__ = ["analysis", "baselines", "datasets", "debug_pairs", "gpu_sandbox", "quality",
           "reflect", "report", "run", "scaling", "slice", "spread", "stats", "tiny_model",
           "vllm_gpu"]
