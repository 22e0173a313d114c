"""The solution memory: what finished runs leave for later ones (issue 21, seed 004).

    python -m engine.memory show [--memory PATH]
    python -m engine.memory add runs/<id> [runs/<id> ...] [--shipped]
    python -m engine.memory rebuild [RUNS_DIR ...] [--shipped]

A SQLite file, by default `$XDG_CACHE_HOME/treeml/memory.sqlite` (~/.cache/...), `--memory`
names another or turns it off. Every finished start of a run adds (`remember_run`):
- its task: fingerprint, data file name, type, metric, meta-features of its training rows;
- cases: its best nodes' model code that beat the run's baseline root, with operator and
  normalised gain (at most CASES_PER_RUN, distinct code; code that names one of the task's
  columns, or applies feature programs, which do, is left out: it cannot run on another
  task's);
- fixes: each failed node a debug step cured, as (its error line, its code, the fixed code).

A run reads the user's memory together with the one the project ships
(`engine/memory_shipped.jsonl`, built by `rebuild --shipped` from the project's own benchmark
runs on its shipped datasets), and retrieves by task meta-features (operators/retrieval.py):
the nearest other tasks' cases become recall drafts, and a debug step is shown the fix of the
nearest matching error. Nothing here reads a label of the run at hand: only its training
rows' shape, and other runs' stored code and scores.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from common.errors import UserError, error_exit
from engine.config import RunConfig
from engine.records.runs import open_run
from engine.records.store import RunStore
from engine.task.prepare import PreparedTask
from operators.harness import model_part
from operators.retrieval import Case, Fix, meta_features, nearest_cases, task_fingerprint
from search.journal import Journal
from search.node import Operator, code_hash
from search.policy import Proposal

OFF = "off"
SHIPPED = Path(__file__).with_name("memory_shipped.jsonl")
CASES_PER_RUN = 3  # stored per run
RECALLED_CASES = 2  # at most, per run: a recall draft each, in its root slots
# Retrieved per run when the floor runs cases as stored (engine-run, seconds each): the recall
# adapts the one that did best here (search/greedy.py)
TRIED_CASES = 3
_NOT_CASES = (Operator.BASELINE, Operator.ENSEMBLE, Operator.ANALYZE, Operator.INSIGHTS)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (fingerprint TEXT PRIMARY KEY, dataset TEXT, task_type TEXT,
                                  metric TEXT, meta TEXT);
CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, fingerprint TEXT, added REAL);
CREATE TABLE IF NOT EXISTS cases (case_id TEXT PRIMARY KEY, run_id TEXT, fingerprint TEXT,
                                  operator TEXT, metric TEXT, gain REAL, code TEXT);
CREATE TABLE IF NOT EXISTS fixes (fix_id TEXT PRIMARY KEY, run_id TEXT, fingerprint TEXT,
                                  error TEXT, failed TEXT, fixed TEXT);
"""


ENV = "TREEML_MEMORY"  # the default setting: a path or "off" (the test suite sets "off")


def default_path() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "treeml" / "memory.sqlite"


def resolve(setting: str | None) -> Path | None:
    """The store a `--memory` setting names (empty: $TREEML_MEMORY, else the default path):
    None when it is off."""
    if not setting:
        setting = os.environ.get(ENV, "")
    if not setting:
        return default_path()
    return None if setting == OFF else Path(setting).expanduser()


def fingerprint(task: PreparedTask) -> str:
    return task_fingerprint([c for c in task.train.columns if c != task.target], task.target)


@dataclass(frozen=True)
class Recollection:
    """One run's view of the memory: every case and fix, other tasks' and its own."""

    cases: tuple[Case, ...] = ()
    fixes: tuple[Fix, ...] = ()

    @property
    def case_ids(self) -> tuple[str, ...]:
        return tuple(c.case_id for c in self.cases)


@dataclass(frozen=True)
class RunMemory:
    """What one run adds: its task, cases and fixes."""

    run_id: str
    fingerprint: str
    task: dict[str, Any]
    cases: list[dict[str, Any]]
    fixes: list[dict[str, Any]]


def extract(run_dir: Path) -> RunMemory:
    """What a finished run teaches: read from its directory (Parquet and manifest)."""
    run = open_run(run_dir)
    return learn(run.store.run_id, run.task(), run.journal,
                 Path(str(run.config.get("data") or run_dir.name)).name)


def learn(run_id: str, task: PreparedTask, journal: Journal, dataset: str) -> RunMemory:
    """What a run teaches, from its task and Journal (the driver holds both at its end)."""
    mark = fingerprint(task)
    meta = meta_features(task.train, task.target, task.task_type)
    return RunMemory(
        run_id=run_id, fingerprint=mark,
        task={"fingerprint": mark, "dataset": dataset, "task_type": task.task_type,
              "metric": task.metric.name, "meta": meta},
        cases=_cases(journal, mark, task.metric.name,
                     [str(c) for c in task.train.columns if c != task.target]),
        fixes=_fixes(journal, mark))


def names_a_column(code: str, columns: Iterable[str]) -> bool:
    """Whether code names one of its task's columns as a string: code like that cannot run
    on another task's columns (recalled as-is, it failed with a KeyError)."""
    return any(f"'{c}'" in code or f'"{c}"' in code for c in columns)


def _cases(journal: Journal, mark: str, metric: str,
           columns: list[str]) -> list[dict[str, Any]]:
    base = journal.baseline()
    if base is None or base.metric is None:
        return []
    scale = max(abs(base.metric), 1e-12)
    ranked = sorted((n for n in journal.eligible_nodes
                     if n.operator not in _NOT_CASES and n.has_model_code
                     and not n.feature_set and journal.beats_baseline(n)),
                    key=lambda n: -(n.metric or 0.0))
    cases: dict[str, dict[str, Any]] = {}
    for node in ranked:
        code = model_part(node.code).strip()
        case_id = code_hash(mark + code)
        if case_id not in cases and not names_a_column(code, columns):
            cases[case_id] = {"case_id": case_id, "fingerprint": mark,
                              "operator": node.operator.value, "metric": metric,
                              "gain": ((node.metric or 0.0) - base.metric) / scale, "code": code}
        if len(cases) == CASES_PER_RUN:
            break
    return list(cases.values())


def _fixes(journal: Journal, mark: str) -> list[dict[str, Any]]:
    fixes = []
    for node in journal:
        parent = journal.get(node.parent_id) if node.parent_id else None
        if (node.operator.traits.repairs and node.is_ok and parent is not None
                and parent.is_buggy and parent.error and parent.has_model_code
                and node.has_model_code):
            error = parent.error.strip().splitlines()[0][:300]
            failed, fixed = model_part(parent.code).strip(), model_part(node.code).strip()
            fixes.append({"fix_id": code_hash(mark + error + fixed), "fingerprint": mark,
                          "error": error, "failed": failed, "fixed": fixed})
    return fixes


def _insert(db: sqlite3.Connection, run_id: str, tasks: Iterable[dict[str, Any]],
            cases: Iterable[dict[str, Any]], fixes: Iterable[dict[str, Any]]) -> None:
    """Rows of tasks, cases and fixes (a run's, or the shipped file's records), the cases and
    fixes under `run_id`; a row already held under the same key is replaced."""
    db.executemany("INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?)",
                   [(t["fingerprint"], t["dataset"], t["task_type"], t["metric"],
                     json.dumps(t["meta"])) for t in tasks])
    db.executemany("INSERT OR REPLACE INTO cases VALUES (?, ?, ?, ?, ?, ?, ?)",
                   [(c["case_id"], run_id, c["fingerprint"], c["operator"], c["metric"],
                     c["gain"], c["code"]) for c in cases])
    db.executemany("INSERT OR REPLACE INTO fixes VALUES (?, ?, ?, ?, ?, ?)",
                   [(f["fix_id"], run_id, f["fingerprint"], f["error"], f["failed"],
                     f["fixed"]) for f in fixes])


class Memory:
    """The SQLite store of one user (or of a test)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
                db.executescript(_SCHEMA)
                yield db
        except (sqlite3.Error, OSError) as exc:
            raise UserError(f"the memory {self.path} cannot be used ({exc}); pass "
                            "--memory PATH for another file, or --memory off") from exc

    def add(self, learned: RunMemory) -> None:
        """Add (or replace) one run's task, cases and fixes, in one transaction."""
        with self._db() as db:
            db.execute("DELETE FROM cases WHERE run_id = ?", (learned.run_id,))
            db.execute("DELETE FROM fixes WHERE run_id = ?", (learned.run_id,))
            db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?)",
                       (learned.run_id, learned.fingerprint, time.time()))
            _insert(db, learned.run_id, [learned.task], learned.cases, learned.fixes)

    def load(self, records: Iterable[dict[str, Any]], run_id: str) -> None:
        """Insert records in the shipped file's form (`records`), under one run id."""
        by_kind: dict[str, list[dict[str, Any]]] = {"task": [], "case": [], "fix": []}
        for r in records:
            if r["kind"] in by_kind:
                by_kind[r["kind"]].append(r)
        with self._db() as db:
            _insert(db, run_id, by_kind["task"], by_kind["case"], by_kind["fix"])

    def add_all(self, runs: Iterable[RunMemory]) -> None:
        for one in runs:
            self.add(one)

    def clear(self) -> None:
        with self._db() as db:
            for table in ("tasks", "runs", "cases", "fixes"):
                db.execute(f"DELETE FROM {table}")

    def records(self) -> list[dict[str, Any]]:
        """Every row, in the shipped file's form (one dict per task, case and fix)."""
        if not self.path.is_file():
            return []
        with self._db() as db:
            db.row_factory = sqlite3.Row
            out: list[dict[str, Any]] = []
            for row in db.execute("SELECT * FROM tasks ORDER BY fingerprint"):
                out.append({"kind": "task", **dict(row), "meta": json.loads(row["meta"])})
            for kind, table in (("case", "cases"), ("fix", "fixes")):
                key = "case_id" if kind == "case" else "fix_id"
                for row in db.execute(f"SELECT * FROM {table} ORDER BY {key}"):
                    fields = dict(zip(row.keys(), tuple(row), strict=True))
                    fields.pop("run_id")
                    out.append({"kind": kind, **fields})
            return out


def shipped_records(path: Path | None = None) -> list[dict[str, Any]]:
    path = SHIPPED if path is None else path
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def recollect(records: Iterable[dict[str, Any]]) -> Recollection:
    """Cases (with their task's meta-features) and fixes from store and shipped records."""
    records = list(records)
    tasks = {r["fingerprint"]: r for r in records if r["kind"] == "task"}
    cases: dict[str, Case] = {}
    fixes: dict[str, Fix] = {}
    for r in records:
        task = tasks.get(r.get("fingerprint", ""))
        if r["kind"] == "case" and task is not None:
            cases[r["case_id"]] = Case(
                case_id=r["case_id"], fingerprint=r["fingerprint"], dataset=task["dataset"],
                task_type=task["task_type"], meta=task["meta"], operator=r["operator"],
                metric=r["metric"], gain=float(r["gain"]), code=r["code"])
        elif r["kind"] == "fix":
            fixes[r["fix_id"]] = Fix(fix_id=r["fix_id"], fingerprint=r["fingerprint"],
                                     error=r["error"], failed=r["failed"], fixed=r["fixed"])
    return Recollection(tuple(cases.values()), tuple(fixes.values()))


def recall(path: Path) -> Recollection:
    """The memory a run retrieves from: the user's store at `path` and the shipped one."""
    return recollect([*shipped_records(), *Memory(path).records()])


def retrieve(task: PreparedTask, config: RunConfig, console: Console, recalls: int
             ) -> tuple[Recollection, dict[str, Any]]:
    """The cases (nearest other tasks' working code) and fixes this run may use, from the
    memory; and the record of them for the manifest and summary. With the
    floor, TRIED_CASES cases run as stored and `recalls` recall drafts adapt the best of them
    here; without it, the `recalls` nearest are recalled."""
    path = resolve(config.memory)
    if path is None:
        return Recollection(), {"store": "off"}
    mark = fingerprint(task)
    memory = recall(path)
    cases = nearest_cases(meta_features(task.train, task.target, task.task_type), mark,
                          task.task_type, memory.cases,
                          k=TRIED_CASES if config.floor else recalls,
                          needs_proba=task.metric.needs_proba)
    fixes = tuple(f for f in memory.fixes if f.fingerprint != mark)
    record = {"store": str(path), "fingerprint": mark, "fixes": len(fixes),
              "cases": [{"case_id": c.case_id, "dataset": c.dataset, "operator": c.operator,
                         "gain": round(c.gain, 4), "metric": c.metric} for c in cases]}
    if cases:
        console.print("recalling " + ", ".join(f"{c.operator} code of {c.dataset}"
                                                for c in cases)
                      + f" (memory {path}); {len(fixes)} remembered fixes", markup=False)
    return Recollection(tuple(cases), fixes), record


def still_recalled(requeue: list[Proposal], cases: tuple[Case, ...]) -> list[Proposal]:
    """The proposals in flight at a kill that can still run: a recall or case node of a case
    this start no longer retrieves (the memory gained nearer ones since) has no code to show.
    A case node is left to the floor, which proposes each case without a node again, sized to
    this start (search/floor.py)."""
    ids = {c.case_id for c in cases}
    return [p for p in requeue if not p.operator.traits.from_case
            or (p.operator is not Operator.CASE and p.idea in ids)]


def remember_run(config: RunConfig, store: RunStore, task: PreparedTask, journal: Journal,
                 console: Console) -> dict[str, Any]:
    """Add the finished run to the memory; a memory that fails loses nothing of the run."""
    path = resolve(config.memory)
    if path is None:
        return {}
    try:
        learned = learn(store.run_id, task, journal, Path(str(config.data or store.root.name)).name)
        Memory(path).add(learned)
    except Exception as exc:  # the run is stored: the memory is extra
        console.print(f"warning: the run was not added to the memory: {exc}", markup=False)
        return {"added": False, "error": str(exc)}
    return {"added": True, "added_cases": len(learned.cases), "added_fixes": len(learned.fixes)}


def run_dirs(roots: Iterable[Path]) -> list[Path]:
    """Every run directory under `roots` (a folder holding manifest.json), oldest first (a
    run id starts with its start time), so a rebuild adds them in the order they ran."""
    found = []
    for root in roots:
        if (root / "manifest.json").is_file():
            found.append(root)
        else:
            found += [p.parent for p in root.rglob("manifest.json")]
    return sorted(set(found), key=lambda p: (p.name, str(p)))


def write_shipped(to: Path, runs: list[RunMemory], keep: list[dict[str, Any]]) -> None:
    """The shipped file: `keep` (records already shipped) and `runs`, through a scratch store
    so the same replace rules hold as in a user's."""
    with tempfile.TemporaryDirectory() as scratch:
        target = Memory(Path(scratch) / "memory.sqlite")
        target.load(keep, run_id="shipped")
        target.add_all(runs)
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in target.records())
    to.write_text(text, encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine.memory",
                                     description="Show or fill the solution memory.")
    parser.add_argument("--memory", default=None, metavar="PATH",
                        help=f"the store (default: {default_path()})")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("show", help="what the memory holds: tasks, cases, fixes")
    add = sub.add_parser("add", help="add finished runs")
    add.add_argument("runs", nargs="+", type=Path, help="run directories, runs/<id>")
    add.add_argument("--shipped", action="store_true",
                     help=f"add them to the project's shipped memory ({SHIPPED.name}) instead")
    add.add_argument("--to", type=Path, default=SHIPPED, metavar="FILE",
                     help="with --shipped: the file read and written (default: the project's)")
    rebuild = sub.add_parser("rebuild", help="empty the memory and add every run found")
    rebuild.add_argument("roots", nargs="*", type=Path, default=[Path("runs")],
                         help="folders searched for run directories (default: runs)")
    rebuild.add_argument("--shipped", action="store_true",
                         help=f"write the project's shipped memory ({SHIPPED.name}) instead")
    rebuild.add_argument("--to", type=Path, default=SHIPPED, metavar="FILE",
                         help="with --shipped: the file written (default: the project's)")
    return parser


def show(records: list[dict[str, Any]], where: str) -> str:
    tasks = {r["fingerprint"]: r for r in records if r["kind"] == "task"}
    lines = [f"{where}: {len(tasks)} tasks, "
             f"{sum(r['kind'] == 'case' for r in records)} cases, "
             f"{sum(r['kind'] == 'fix' for r in records)} fixes"]
    for r in records:
        name = tasks.get(r.get("fingerprint", ""), {}).get("dataset", "?")
        if r["kind"] == "case":
            lines.append(f"  case {r['case_id']}  {name:<28} {r['operator']:<9} "
                         f"gain {r['gain']:+.3f} ({r['metric']})")
        elif r["kind"] == "fix":
            lines.append(f"  fix  {r['fix_id']}  {name:<28} {r['error'][:70]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "add":
            runs = [extract(d) for d in args.runs]  # all read before anything is written
            if args.shipped:
                write_shipped(args.to, runs, shipped_records(args.to))
                where = args.to
            else:
                memory = _store(args.memory)
                memory.add_all(runs)
                where = memory.path
            for run_dir, learned in zip(args.runs, runs, strict=True):
                print(f"added {run_dir} to {where}: {len(learned.cases)} cases, "
                      f"{len(learned.fixes)} fixes")
        elif args.command == "rebuild":
            dirs = run_dirs(args.roots)
            if not dirs:
                raise UserError("no run directory under " + ", ".join(map(str, args.roots)))
            runs = [extract(d) for d in dirs]  # all read before anything is replaced
            if args.shipped:
                write_shipped(args.to, runs, keep=[])
                where = args.to
            else:
                memory = _store(args.memory)
                memory.clear()
                memory.add_all(runs)
                where = memory.path
            print(f"rebuilt {where} from {len(dirs)} runs: "
                  f"{sum(len(one.cases) for one in runs)} cases, "
                  f"{sum(len(one.fixes) for one in runs)} fixes")
        else:
            memory = _store(args.memory)
            print(show(memory.records(), str(memory.path)))
            print(show(shipped_records(), f"shipped ({SHIPPED})"))
    except UserError as exc:
        return error_exit(exc)
    return 0


def _store(setting: str | None) -> Memory:
    """The user's store that a command reads or writes (the shipped file needs none)."""
    path = resolve(setting)
    if path is None:
        raise UserError("the memory is off (--memory off): name a file to use one")
    return Memory(path)


if __name__ == "__main__":
    sys.exit(main())

