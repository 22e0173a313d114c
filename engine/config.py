"""Typed run configuration, validated once at start-up.

The CLI flags and a `task.yaml` carry the same fields; unknown YAML keys are errors (a typo
must not silently fall back to a default). Every problem is a `UserError` with one line that
says what is wrong and how to fix it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, NoReturn

import yaml

from actors.llm import Routes, located, parse_routes, parse_spec, routes_from_mapping
from common.errors import UserError
from common.metric import METRICS
from search.node import Operator
from search.programs import PATIENCE, RECORD_FROM, WRITES

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


def _flag(help: str, *, metavar: str | None = None, choices: tuple[str, ...] | None = None,
          parse: Any = None) -> dict[str, Any]:
    """A field that is also a command-line flag: `--name-with-dashes`, this help; a bool that
    defaults to True becomes `--no-name`. `parse` turns the flag's text into the value."""
    return {"help": help, "metavar": metavar, "choices": choices, "parse": parse}


@dataclass(frozen=True)
class RunConfig:
    """Every option of a run. A field with flag metadata is also a flag of `engine.run`
    (`add_flags`); the others are task.yaml keys only."""

    data: Path | None = field(default=None, metadata=_flag(
        "training CSV with features and the target column"))
    target: str | None = field(default=None, metadata=_flag("name of the column to predict"))
    test: Path | None = field(default=None, metadata=_flag(
        "optional CSV used as the hidden test split (same columns as --data)"))
    metric: str | None = field(default=None, metadata=_flag(
        f"{' | '.join(METRICS)} (default: f1 binary, f1_weighted multiclass, rmse "
        "regression)"))
    description: str = ""
    task_type: str | None = None  # "classification" | "regression"; None: inferred
    # Deployment constraints (task.yaml or the words of a plain-language --task); a node that
    # breaks one is not eligible as best. The final selection also holds the answer's warm
    # one-row prediction to max_predict_ms_per_row, as served (default: engine/evaluation/
    # latency.py's, on its models' time run).
    max_predict_ms_per_row: float | None = None
    max_model_mb: float | None = None
    max_train_seconds: float | None = None
    budget: float = field(default=600.0, metadata=_flag(  # seconds of wall clock
        "wall-clock budget: 90s, 10m, 2h (default 10m)", parse=parse_budget))
    max_nodes: int | None = field(default=None, metadata=_flag(
        "stop after this many nodes in total"))
    max_tokens: int | None = field(default=None, metadata=_flag(
        "stop after this many LLM tokens in total"))
    # None: by the cores (`executor_count`).
    executors: int | None = field(default=None, metadata=_flag(
        "parallel sandboxed executors (default: cores - 1, at least 1; every core with "
        "--llm none)"))
    # One spec, or specs routed by operator: "draft,improve=vllm:big;debug=vllm:small"
    # (task.yaml may give a mapping instead; see actors.llm.parse_routes).
    llm: str = field(default="llama", metadata=_flag(
        "llama (embedded default), llama:/path/model.gguf, vllm:MODEL_OR_PATH, "
        "openai:BASE_URL#MODEL (key from OPENAI_API_KEY), scripted:FILE.json (replay, for "
        "tests), none (no LLM at all: the engine's floor alone); or specs routed by operator: "
        "'draft,improve=SPEC1;debug=SPEC2' (an entry without operators serves the rest)"))
    llm_writes: str = field(default="auto", metadata=_flag(
        "what the LLM writes: features (short feature programs, kept only when they make the "
        "floor's best model better on the same folds), scripts (whole model code: drafts, "
        "improvements, fixes), both (in turn), or auto (default: features for the embedded "
        "llama model, both for vllm and openai, scripts for scripted replays)",
        choices=("auto", *WRITES)))
    llm_patience: int = field(default=PATIENCE, metadata=_flag(
        "when the LLM writes feature programs alone: ask it for none after this many in a "
        f"row were not kept, or once (from the {RECORD_FROM}th scored on) they were better "
        "no more often than chance, and give its CPUs to executors (default "
        f"{PATIENCE}; 0: never)"))
    llm_replicas: int = field(default=1, metadata=_flag(
        "LLM actors (model copies) per spec (default 1)"))
    # Requests one LLM actor serves at once; None: the backend's own (llama 1, vllm 32, ...).
    llm_concurrency: int | None = field(default=None, metadata=_flag(
        "requests each LLM actor serves at once (default: llama 1, vllm 32, openai 8)"))
    tp: int = field(default=1, metadata=_flag(  # one placement group on one node
        "tensor parallel size: GPUs per vLLM replica, packed on one node (default 1)"))
    llm_gpus: float | None = field(default=None, metadata=_flag(
        "GPUs per vLLM actor (default: --tp; 0 runs vLLM on CPU)"))
    llm_resource: str | None = field(default=None, metadata=_flag(
        "custom Ray resource each LLM actor needs, e.g. llm (cluster.yaml declares it on the "
        "GPU nodes)", metavar="NAME"))
    executor_resource: str | None = field(default=None, metadata=_flag(
        "custom Ray resource each executor needs, e.g. executor", metavar="NAME"))
    executor_gpus: float = field(default=0.0, metadata=_flag(
        "GPU share each executor (candidate) gets, e.g. 0.25 (default 0)"))
    vllm_args: dict[str, Any] | None = None  # task.yaml only: more AsyncEngineArgs for vLLM
    address: str | None = field(default=None, metadata=_flag(
        "Ray cluster to join, e.g. auto (default: start a local one)"))
    policy: str = field(default="greedy", metadata=_flag(
        "search policy: greedy, mcts or sela (default greedy)"))
    seed: int = field(default=0, metadata=_flag(
        "seed for splits, policy and sampling (default 0)"))
    # Seed of the train/valid/test split alone; None: `seed`. Benchmarks fix it per task and vary
    # `seed`, so repeated searches differ in the search, not in the data.
    split_seed: int | None = field(default=None, metadata=_flag(
        "seed for the train/valid/test split alone (default: --seed)"))
    out: Path = field(default=Path("runs"), metadata=_flag(
        "folder for run directories (default runs/)"))
    exec_timeout: float = field(default=300.0, metadata=_flag(
        "seconds one run of a candidate script may take (default 300)"))
    # Cross-validation folds of train+valid that score every node (engine/evaluation/folds.py);
    # None: by the number of rows.
    folds: int | None = field(default=None, metadata=_flag(
        "cross-validation folds of train+valid that score every node; 1 is the holdout "
        "(learn from train, score on valid) (default: 5 up to 20,000 rows, else 1)"))
    # Seconds one generation may take before it counts as hung: the node is lost and the LLM
    # actor replaced (a synchronous actor cannot cancel a running call). task.yaml only.
    llm_timeout: float = 600.0
    select: str = field(default="confirmed", metadata=_flag(
        "how the final best is chosen: confirmed (default: a node replaces the baseline root "
        "only if it beats it in 90%% of bootstrap resamples of valid), valid (the best valid "
        "score) or cv (5-fold cross-validation of the top 3 nodes on train+valid)",
        choices=("confirmed", "valid", "cv")))
    baseline: bool = field(default=True, metadata=_flag(
        "skip the engine's LightGBM baseline root node"))
    ensemble: bool = field(default=True, metadata=_flag(
        "no ensemble selection over the best nodes' held-out predictions"))
    floor: bool = field(default=True, metadata=_flag(
        "no engine-written work on idle executors: no portfolio of model configurations, no "
        "Optuna trials (LLM-written nodes and the baseline only)"))
    save_model: bool = field(default=True, metadata=_flag(
        "do not keep the answer's fitted models in best/model/ (kept, engine.predict needs "
        "no training; it costs one more fit of the answer per fold, and a replay, at the end "
        "of the run)"))
    memory: str = field(default="", metadata=_flag(
        "the solution memory, a SQLite file: other runs' working code is recalled from it "
        "(recall drafts, fixes shown to debug steps, with the memory the project ships) and "
        "this run is added to it at the end; 'off' for none (default: $TREEML_MEMORY, else "
        "~/.cache/treeml/memory.sqlite)", metavar="PATH|off"))
    analyst: bool = field(default=False, metadata=_flag(
        "before drafting, run an LLM-written data exploration script; what it prints joins "
        "every later prompt"))
    reflect: bool = field(default=False, metadata=_flag(
        "before each debug and improve step, ask the LLM what failed or what limits the score "
        "(Reflexion); the answer goes into the step's prompt"))
    quiet: bool = field(default=False, metadata=_flag(
        "plain log lines instead of the live display"))
    weak_isolation: bool = field(default=False, metadata=_flag(
        "run candidate scripts even where bubblewrap is missing or cannot start: under "
        "`unshare -n` and resource limits, or the limits alone, where they could read the "
        "run's hidden labels (the manifest and summary say so)"))
    # LLM drafts before improving; None: 3, or 1 with the floor on (its portfolio already
    # holds the model families a draft would try).
    num_drafts: int | None = None
    debug_prob: float = 0.5
    max_debug_depth: int = 3

    @property
    def writes(self) -> str:
        """What the LLM writes (`llm_writes`, auto resolved by the backend serving feature
        programs: a small embedded model does well with narrow actions, and poorly with whole
        scripts). A program is paired with a configuration of the floor or the baseline root:
        with neither, auto means scripts."""
        if self.llm_writes != "auto":
            return self.llm_writes
        if not (self.floor or self.baseline):
            return "scripts"
        kind = parse_spec(self.routes.spec_for(Operator.FEATURES))[0]
        return {"llama": "features", "scripted": "scripts"}.get(kind, "both")

    @property
    def executor_count(self) -> int:
        """`executors`, or one per core beyond the one the LLM and the driver share, at least
        one; without an LLM every core (the driver mostly waits on Ray)."""
        if self.executors is not None:
            return self.executors
        return max(1, (os.cpu_count() or 2) - (0 if self.routes.none else 1))

    @cached_property
    def routes(self) -> Routes:
        """`llm` parsed, once: the spec serving each operator."""
        return parse_routes(self.llm)

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
        if self.llm_patience < 0:
            raise UserError(f"bad --llm-patience {self.llm_patience}: use 0 (never stop asking "
                            "the LLM) or more")
        if self.executors is not None and self.executors < 1:
            raise UserError(f"bad --executors {self.executors}: it must be at least 1")
        if self.folds is not None and not 1 <= self.folds <= MAX_FOLDS:
            raise UserError(f"bad --folds {self.folds}: use 1 (the holdout) to {MAX_FOLDS}")
        if self.exec_timeout <= 0:
            raise UserError("bad --exec-timeout: it must be more than zero seconds")
        if self.llm_timeout <= 0:
            raise UserError("bad llm_timeout: it must be more than zero seconds")
        if self.llm_writes in ("features", "both") and not (self.floor or self.baseline):
            raise UserError(f"--llm-writes {self.llm_writes} pairs each feature program with "
                            "the floor's or the baseline root's model: drop --no-floor or "
                            "--no-baseline, or use --llm-writes scripts")
        if self.routes.none and not (self.floor or self.baseline):
            raise UserError("--llm none with --no-floor and --no-baseline leaves nothing to run: "
                            "drop one of them, or name an LLM")
        from search.policy import available

        if self.policy not in available():
            raise UserError(
                f"unknown policy {self.policy!r}; choose one of: {', '.join(available())}"
            )
        self._validate_placement()
        return self

    def _validate_placement(self) -> None:
        specs = self.routes.specs
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
MAX_FOLDS = 20
TASK_TYPES = ("classification", "regression")
CONSTRAINT_KEYS = ("max_predict_ms_per_row", "max_model_mb", "max_train_seconds")
# The final selections of engine/evaluation/select.py: the choices of the `select` field.
SELECT_METHODS: tuple[str, ...] = next(
    f.metadata["choices"] for f in fields(RunConfig) if f.name == "select")
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


    text = routes_from_mapping(value, source) if isinstance(value, dict) else str(value)
    return parse_routes(text).map_specs(lambda spec: located(spec, base)).text()


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


class CommandParser(argparse.ArgumentParser):
    """argparse with the engine's error style: one line on stderr, exit code 2. A value that
    starts with a dash (`--budget -5m`) is taken as the value, so the value's own check says
    what is wrong with it, instead of argparse reading it as an unknown option."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        options = {flag for action in self._actions for flag in action.option_strings}
        takes_value = {flag for action in self._actions if action.nargs is None
                       for flag in action.option_strings}
        joined: list[str] = []
        for token in argv:
            if (joined and joined[-1] in takes_value and token.startswith("-")
                    and token.split("=", 1)[0] not in options):
                joined[-1] = f"{joined[-1]}={token}"
            else:
                joined.append(token)
        return super().parse_known_args(joined, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}; see {self.prog} --help\n")


_FLAG_TYPES: dict[str, Any] = {"Path | None": Path, "Path": Path, "int": int,
                               "int | None": int, "float": float, "float | None": float,
                               "str": str, "str | None": str}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per RunConfig field that has flag metadata; every flag defaults to None, so
    only what was given overrides a task file."""
    for f in fields(RunConfig):
        if "help" not in f.metadata:
            continue
        meta, flag = f.metadata, "--" + f.name.replace("_", "-")
        if f.type == "bool":
            negated = f.default is True
            parser.add_argument(f"--no-{flag[2:]}" if negated else flag, dest=f.name,
                                action="store_false" if negated else "store_true",
                                default=None, help=meta["help"])
            continue
        kind = str if meta["parse"] else _FLAG_TYPES[str(f.type)]
        parser.add_argument(flag, dest=f.name, type=kind, metavar=meta["metavar"],
                            choices=meta["choices"], help=meta["help"])


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The RunConfig values of the parsed flags (None: not given), each parsed once."""
    values = {}
    for f in fields(RunConfig):
        if "help" in f.metadata:
            value = getattr(args, f.name)
            parse = f.metadata["parse"]
            values[f.name] = parse(value) if parse and value is not None else value
    return values


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
