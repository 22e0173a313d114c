"""The benchmark's results table (`OUT/results.parquet`): one row per run of a method on a
task, fold and seed; read, checked, extended and written whole by `benchmarks.run`, read by
`benchmarks.report` and `benchmarks.memory`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from common.errors import UserError
from engine.records.runs import open_run
from fileio import replacing
from operators.kinds.ensemble import member_weights
from search.programs import answer_programs, program_counts

RESULTS = "results.parquet"
COLUMNS = (
    "task", "task_type", "metric", "method", "kind", "seed", "protocol", "fold", "outer_folds",
    "split_seed", "status", "error", "valid", "test", "nodes", "ok_nodes", "prompt_tokens",
    "completion_tokens", "seconds", "budget", "cores", "best_operator", "run_dir", "data_hash",
    "started_at", "finished_at", "programs_proposed", "programs_rejected", "programs_failed",
    "programs_scored", "programs_kept", "program_llm_seconds", "answer_uses_program",
    "answer_unkept_share", "llm_retired_seconds", "llm_retired_why", "exec_seconds",
    "program_exec_seconds",
)
# What one OUT holds one of (a row without them was written before they were recorded: sela,
# the engine's own split).
SUITE_KEYS = {"protocol": "sela", "outer_folds": 1, "split_seed": 0}



def measure_run(run_dir: Path) -> dict[str, Any]:
    """A search's row from what its run directory holds."""
    stored = open_run(run_dir)
    manifest, rows, journal = stored.manifest, stored.rows, stored.journal
    result, spent = manifest.get("result", {}), manifest.get("spent", {})
    started = float(manifest.get("starts", [{}])[0].get("at", 0.0))
    programs = program_counts(journal)
    answer = journal.final()
    used = answer_programs(journal, member_weights(answer)) if answer is not None else None
    return {
        "metric": manifest.get("metric"), "valid": result.get("best_valid"),
        "test": result.get("best_test"), "nodes": len(rows),
        "ok_nodes": sum(r["metric"] is not None for r in rows),
        "prompt_tokens": int(spent.get("prompt_tokens", 0)),
        "completion_tokens": int(spent.get("completion_tokens", 0)),
        "seconds": float(spent.get("seconds", 0.0)),
        "best_operator": result.get("best_operator"), "run_dir": str(run_dir),
        "data_hash": manifest.get("data_hash"), "started_at": started,
        "finished_at": started + float(spent.get("seconds", 0.0)),
        "programs_proposed": programs.proposed, "programs_rejected": programs.rejected,
        "programs_failed": programs.failed, "programs_scored": programs.scored,
        "programs_kept": programs.kept, "program_llm_seconds": programs.median_llm_seconds,
        "answer_uses_program": bool(used and used.kept),
        "answer_unkept_share": used.not_kept_share if used else None,
        # when the LLM was asked for no more (search.programs.programs_spent), and why; ""
        # when it never was (empty: a row from before these columns, not known)
        "llm_retired_seconds": spent.get("llm_retired_seconds"),
        "llm_retired_why": str(spent.get("llm_retired_why") or ""),
        # the executors' seconds on every node's runs, and on the feature programs' runs
        "exec_seconds": sum(node.exec_seconds for node in journal),
        "program_exec_seconds": programs.exec_seconds,
    }


def whole(value: Any) -> int:
    """A whole-number cell of the results table (a fold, a seed), 0 when missing (rows written
    before the column existed)."""
    return 0 if value is None or pd.isna(value) else int(value)


def load_results(path: Path) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame(columns=list(COLUMNS))
    frame = pd.read_parquet(path).reindex(columns=list(COLUMNS))
    for column, default in {"fold": 0, **SUITE_KEYS}.items():
        values = frame[column].astype(object).where(frame[column].notna(), default)
        frame[column] = values.astype(type(default))
    return frame


def check_same_suite(results: pd.DataFrame, wanted: dict[str, Any], path: Path) -> None:
    """One results file holds one protocol, fold count and split seed (`wanted`, by their
    SUITE_KEYS): rows of another would be skipped as done, or mixed into one report."""
    for key, value in wanted.items():
        found = sorted({str(v) for v in results[key]} - {str(value)})
        if found:
            raise UserError(f"{path} holds runs with --{key.replace('_', '-')} "
                            f"{', '.join(found)}, not {value}: pass that to resume them, or "
                            "give another --out")


def save_results(path: Path, frame: pd.DataFrame) -> None:
    """Write the whole table to a hidden file, then rename it: a reader never sees half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        frame.reindex(columns=list(COLUMNS)).to_parquet(tmp, index=False)


def add_row(results: pd.DataFrame, row: dict[str, Any]) -> pd.DataFrame:
    key = (results.task == row["task"]) & (results.method == row["method"]) & \
        (results.seed == row["seed"]) & (results.fold == row["fold"])
    kept = results[~key].to_dict("records")
    return pd.DataFrame([*kept, {c: row.get(c) for c in COLUMNS}], columns=list(COLUMNS))
