"""Typed run configuration, validated once at start-up.

The CLI flags and a `task.yaml` carry the same fields; unknown YAML keys are errors (a typo
must not silently fall back to a default). Every problem is a `UserError` with one line that
says what is wrong and how to fix it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from search.errors import UserError
from search.metric import METRICS

_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_budget(text: str | float | int) -> float:
    """`"90s"`, `"10m"`, `"2h"` or a number of seconds -> seconds (> 0)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        seconds = float(text)
    else:
        match = _BUDGET.match(str(text))
        if not match:
            raise UserError(
                f"bad budget {text!r}: use a number with s, m or h, e.g. --budget 90s, 10m, 2h"
            )
        seconds = float(match.group(1)) * _UNIT[match.group(2)]
    if seconds <= 0:
        raise UserError(f"bad budget {text!r}: it must be more than zero, e.g. --budget 10m")
    return seconds


def default_executors() -> int:
    """One executor per core beyond the one the LLM and driver need, at least one."""
    return max(1, (os.cpu_count() or 2) - 1)


@dataclass(frozen=True)
class RunConfig:
    data: Path | None = None
    target: str | None = None
    test: Path | None = None
    metric: str | None = None
    description: str = ""
    task_type: str | None = None  # "classification" | "regression"; None: inferred
    # Deployment constraints (task.yaml or the words of a plain-language --task); a node that
    # breaks one is not eligible as best.
    max_predict_ms_per_row: float | None = None
    max_model_mb: float | None = None
    max_train_seconds: float | None = None
    budget: float = 600.0  # seconds of wall clock
    max_nodes: int | None = None
    max_tokens: int | None = None
    executors: int = field(default_factory=default_executors)
    # One spec, or specs routed by operator: "draft,improve=vllm:big;debug=vllm:small"
    # (task.yaml may give a mapping instead; see actors.llm.parse_routes).
    llm: str = "llama"
    llm_replicas: int = 1  # actors per spec
    # Requests one LLM actor serves at once; None: the backend's own (llama 1, vllm 32, ...).
    llm_concurrency: int | None = None
    tp: int = 1  # tensor parallel GPUs per vLLM replica (one placement group on one node)
    llm_gpus: float | None = None  # GPUs per LLM actor; None: tp for vllm, 0 for the others
    llm_resource: str | None = None  # custom Ray resource each LLM actor needs (e.g. "llm")
    executor_resource: str | None = None  # custom Ray resource each executor needs
    executor_gpus: float = 0.0  # GPU share per executor (per candidate), e.g. 0.25
    vllm_args: dict[str, Any] | None = None  # task.yaml only: more AsyncEngineArgs for vLLM
    address: str | None = None  # Ray cluster to join ("auto"); None starts a local one
    policy: str = "greedy"
    seed: int = 0
    # Seed of the train/valid/test split alone; None: `seed`. Benchmarks fix it per task and vary
    # `seed`, so repeated searches differ in the search, not in the data.
    split_seed: int | None = None
    out: Path = Path("runs")
    exec_timeout: float = 300.0
    # Seconds one generation may take before it counts as hung: the node is lost and the LLM
    # actor replaced (a synchronous actor cannot cancel a running call). task.yaml only.
    llm_timeout: float = 600.0
    select: str = "confirmed"  # how the final winner is chosen: one of SELECT_METHODS
    baseline: bool = True  # start with the engine's LightGBM root (operator=baseline)
    ensemble: bool = True  # let the policy propose engine-written ensembles of the best nodes
    analyst: bool = False  # an exploration script before drafting; its findings join prompts
    reflect: bool = False  # a reflection call before every debug and improve step
    quiet: bool = False
    num_drafts: int = 3
    debug_prob: float = 0.5
    max_debug_depth: int = 3

    def validate(self) -> RunConfig:
        if self.data is None:
            raise UserError("no data: pass --data FILE.csv --target COLUMN, or --task task.yaml")
        if not self.target:
            raise UserError("no target column: pass --target COLUMN (the column to predict)")
        if self.metric is not None and self.metric not in METRICS:
            raise UserError(
                f"unknown metric {self.metric!r}; choose one of: {', '.join(sorted(METRICS))}"
            )
        if self.task_type not in (None, *TASK_TYPES):
            raise UserError(f"bad task_type {self.task_type!r}: use {' or '.join(TASK_TYPES)}")
        for name in CONSTRAINT_KEYS:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or value <= 0):
                raise UserError(f"bad {name} {value!r}: it must be a number above zero")
        if self.max_nodes is not None and self.max_nodes < 1:
            raise UserError(f"bad --max-nodes {self.max_nodes}: it must be at least 1")
        if self.select not in SELECT_METHODS:
            raise UserError(f"bad --select {self.select!r}: use confirmed, valid or cv")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UserError(f"bad --max-tokens {self.max_tokens}: it must be at least 1")
        if self.llm_replicas < 1 or (self.llm_concurrency is not None
                                     and self.llm_concurrency < 1):
            raise UserError("bad --llm-replicas/--llm-concurrency: each must be at least 1")
        if self.executors < 1:
            raise UserError(f"bad --executors {self.executors}: it must be at least 1")
        if self.exec_timeout <= 0:
            raise UserError("bad --exec-timeout: it must be more than zero seconds")
        if self.llm_timeout <= 0:
            raise UserError("bad llm_timeout: it must be more than zero seconds")
        from search.policy import available

        if self.policy not in available():
            raise UserError(
                f"unknown policy {self.policy!r}; choose one of: {', '.join(available())}"
            )
        self._validate_placement()
        return self

    def _validate_placement(self) -> None:
        from actors.llm import parse_routes, parse_spec

        specs = parse_routes(self.llm).specs
        if self.tp < 1:
            raise UserError(f"bad --tp {self.tp}: it must be at least 1 (GPUs per vLLM replica)")
        if self.tp > 1 and not any(parse_spec(s)[0] == "vllm" for s in specs):
            raise UserError(f"--tp {self.tp} applies to vllm specs only; --llm has none")
        if self.llm_gpus is not None and self.llm_gpus < 0:
            raise UserError(f"bad --llm-gpus {self.llm_gpus}: it must be 0 or more")
        if self.tp > 1 and self.llm_gpus is not None and self.llm_gpus != self.tp:
            raise UserError(f"--tp {self.tp} shards each replica over {self.tp} GPUs; drop "
                            f"--llm-gpus or set it to {self.tp}")
        if self.executor_gpus < 0:
            raise UserError(f"bad executor_gpus {self.executor_gpus}: it must be 0 or more")
        for flag, name in (("--llm-resource", self.llm_resource),
                           ("--executor-resource", self.executor_resource)):
            if name is not None and (not _RESOURCE.match(name) or name in _BUILTIN):
                raise UserError(f"bad {flag} {name!r}: name a custom Ray resource your nodes "
                                "declare, e.g. llm or executor (not CPU, GPU or memory)")
        if self.vllm_args is not None and not (
                isinstance(self.vllm_args, dict)
                and all(isinstance(k, str) for k in self.vllm_args)):
            raise UserError("bad vllm_args: it must be a mapping like "
                            "{max_model_len: 16384, gpu_memory_utilization: 0.85}")

    def to_json(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunConfig:
        return _build(data, base=Path.cwd(), source="manifest")


_PATHS = {"data", "test", "out"}
TASK_TYPES = ("classification", "regression")
CONSTRAINT_KEYS = ("max_predict_ms_per_row", "max_model_mb", "max_train_seconds")
SELECT_METHODS = ("confirmed", "valid", "cv")  # the final selections of engine/select.py
# What a run writes into its task.yaml: the task and how it was searched, not machine details.
_TASK_YAML_KEYS = ("data", "test", "target", "metric", "task_type", "description",
                   *CONSTRAINT_KEYS, "budget", "seed", "llm", "policy")
TASK_FILE_SUFFIXES = (".yaml", ".yml")
_RESOURCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_BUILTIN = {"CPU", "GPU", "memory", "object_store_memory"}


def _jsonable(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def _build(data: dict[str, Any], base: Path, source: str) -> RunConfig:
    known = {f.name: f for f in fields(RunConfig)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise UserError(
            f"{source}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}"
        )
    values: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        if key in _PATHS:
            path = Path(str(value)).expanduser()
            values[key] = path if path.is_absolute() or key == "out" else base / path
        elif key == "llm":
            values[key] = _llm_paths(value, base, source)
        elif key in ("budget", "max_train_seconds"):
            values[key] = parse_budget(value)
        else:
            values[key] = value
    try:
        return RunConfig(**values)
    except TypeError as exc:
        raise UserError(f"{source}: {exc}") from exc


def _llm_paths(value: Any, base: Path, source: str) -> str:
    """The `llm` value as routes text, with relative file paths made relative to `base`."""
    from actors.llm import parse_routes, routes_from_mapping

    text = routes_from_mapping(value, source) if isinstance(value, dict) else str(value)

    def absolute(spec: str) -> str:
        kind, _, arg = spec.partition(":")
        if kind not in ("scripted", "llama") or not arg:
            return spec
        path = Path(arg).expanduser()
        return f"{kind}:{path if path.is_absolute() else base / path}"

    return parse_routes(text).map_specs(absolute).text()


def load_task_yaml(path: Path) -> RunConfig:
    """Read a task file; relative data paths are relative to the file's folder."""
    if not path.is_file():
        raise UserError(f"task file {path} not found; pass --task path/to/task.yaml")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        reason = str(exc).splitlines()[0]
        raise UserError(f"task file {path} is not valid YAML ({reason}); fix its syntax") from exc
    if not isinstance(data, dict):
        raise UserError(f"task file {path} must be a mapping like 'data: train.csv' per line")
    return _build(data, base=path.parent, source=f"task file {path}")


def merge(base: RunConfig, overrides: dict[str, Any]) -> RunConfig:
    """CLI flags given explicitly win over the task file."""
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})


def is_task_file(text: str) -> bool:
    """Whether `--task TEXT` names a task file (a .yaml/.yml path without spaces, or any
    existing file) rather than a plain-language request."""
    path = Path(text).expanduser()
    return path.is_file() or (path.suffix.lower() in TASK_FILE_SUFFIXES and " " not in text)


def task_yaml_text(config: RunConfig, metric: str, header: str = "") -> str:
    """A task.yaml that runs this task again: `--task runs/<id>/task.yaml`. Paths are absolute,
    since the file lives in the run directory; `metric` is the one the run resolved."""
    values: dict[str, Any] = {}
    for key in _TASK_YAML_KEYS:
        value = metric if key == "metric" else getattr(config, key)
        if value is None or value == "":
            continue
        if key in ("data", "test"):
            value = str(Path(value).expanduser().resolve())
        elif key == "llm" and str(value).startswith(("scripted:", "llama:")) and ":" in value:
            kind, _, arg = str(value).partition(":")
            value = f"{kind}:{Path(arg).expanduser().resolve()}" if arg else kind
        values[key] = value
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    body = yaml.safe_dump(values, sort_keys=False, allow_unicode=True, width=100)
    return "\n".join(lines) + ("\n" if lines else "") + body
