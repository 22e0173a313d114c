"""Ray at the edge: the actors that hold models and sandboxes, and the pool that schedules
onto them.

- `llm`: the LLM interface, the backend registry, `--llm` specs and their routes.
- `llama_backend`, `vllm_backend`, `openai_backend`: the backends.
- `model_assets`: the embedded model, assembled from its PyPI packages.
- `workers`: the LLM and executor actors, their placement and replacement.
- `pool`: slots over actors (submit, await the first to finish, expire, replace).
"""

__all__ = ["llama_backend", "llm", "model_assets", "openai_backend", "pool", "vllm_backend",
           "workers"]
