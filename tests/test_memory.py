"""The solution memory (issue 21): retrieval logic in milliseconds, then real runs (scripted
LLM, bwrap, Ray, SQLite) that add themselves to a store, recall another task's case, and
never recall their own."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.gain import answer_gain_interval
from benchmarks.memory import (
    gain_without_one_row,
    left_out_scores,
    measure,
    table,
)
from benchmarks.memory import main as paired_main
from engine.memory import (
    ENV,
    Memory,
    RunMemory,
    default_path,
    names_a_column,
    recall,
    recollect,
    resolve,
    shipped_records,
    still_recalled,
    write_shipped,
)
from engine.memory import main as memory_main
from engine.records.summary import memory_section
from engine.run import main as run_main
from operators.context import TaskContext
from operators.harness import model_part
from operators.kinds import build_prompt
from operators.retrieval import (
    AS_STORED,
    Case,
    Fix,
    as_stored,
    meta_features,
    model_classes,
    nearest_cases,
    nearest_fix,
    replaced_model,
    task_fingerprint,
)
from search.greedy import GreedyPolicy
from search.journal import Journal
from search.mcts import MCTSPolicy
from search.node import Node, Operator, Status
from search.policy import Proposal
from tests.helpers import make_node

META = {"log_rows": 3.0, "log_columns": 1.0, "numeric_share": 1.0}


def case(case_id: str, fingerprint: str, gain: float = 0.1, task_type: str = "regression",
         rows: float = 3.0, metric: str = "rmse") -> Case:
    return Case(case_id, fingerprint, f"{fingerprint}.csv", task_type, {**META, "log_rows": rows},
                "draft", metric, gain, f"# code of {case_id}\ndef fit_predict(X, y, Xv, Xt): ...")


def test_a_task_never_retrieves_itself_and_the_nearest_task_comes_first() -> None:
    cases = [case("own", "me"), case("far", "t1", rows=5.0), case("near", "t2", rows=3.1),
             case("near-worse", "t2", gain=0.05, rows=3.1), case("lost", "t3", gain=-0.2),
             case("classifier", "t4", task_type="binary", metric="roc_auc"),
             case("labels", "t5", task_type="binary", metric="f1")]
    found = nearest_cases(META, "me", "regression", cases, k=5)
    assert [c.case_id for c in found] == ["near", "far"]  # one per task, gain > 0, same type
    # Classification: only code whose output this task's metric can score: probabilities
    # serve a label metric too (the harness takes the most probable class), labels do not
    # serve a probability metric.
    assert [c.case_id for c in nearest_cases(META, "me", "multiclass", cases,
                                             needs_proba=True)] == ["classifier"]
    assert [c.case_id for c in nearest_cases(META, "me", "binary", cases,
                                             k=5)] == ["classifier", "labels"]


def test_a_reply_replaced_the_cases_model_when_it_no_longer_calls_its_classes() -> None:
    case_code = ("import lightgbm as lgb\nfrom sklearn.preprocessing import StandardScaler\n"
                 "import pandas as pd\n"
                 "model = lgb.LGBMClassifier(**PARAMS)\nscale = StandardScaler()\n"
                 "frame = pd.DataFrame(X)\n")
    assert model_classes(case_code) == {"LGBMClassifier", "StandardScaler"}  # not pandas'
    kept = case_code.replace("pd.DataFrame(X)", "X") + "from sklearn.impute import SimpleImputer\n"
    assert replaced_model(case_code, kept + "imputer = SimpleImputer()\n") == ""
    swapped = ("from sklearn.linear_model import LogisticRegression as LR\n"
               "from sklearn.preprocessing import StandardScaler\n"
               "model = LR(C=0.5)\nscale = StandardScaler()\n")
    assert replaced_model(case_code, swapped) == "the reply replaced its LGBMClassifier with LR"
    assert replaced_model(case_code, "def broken(:") == (
        "the reply replaced its LGBMClassifier, StandardScaler")


def test_the_fingerprint_ignores_rows_and_column_order() -> None:
    assert task_fingerprint(["a", "b"], "y") == task_fingerprint(["b", "a"], "y")
    assert task_fingerprint(["a", "b"], "y") != task_fingerprint(["a", "b"], "z")


def test_meta_features_read_only_the_training_rows_shape() -> None:
    train = pd.DataFrame({"a": [1.0, 2.0, None, 4.0], "s": ["x", "y", "x", "x"],
                          "y": ["p", "q", "p", "p"]})
    meta = meta_features(train, "y", "binary")
    assert meta["numeric_share"] == 0.5 and meta["missing_share"] == 0.125
    assert meta["minority_share"] == 0.25 and meta["log_classes"] == pytest.approx(np.log10(2))


def test_the_nearest_fix_needs_the_same_error_type_and_shared_words() -> None:
    fixes = [Fix("f1", "t1", "KeyError: 'price' not in index", "a", "b"),
             Fix("f2", "t2", "ValueError: could not convert string to float: 'abc'", "c", "d")]
    assert nearest_fix("ValueError: could not convert string to float: 'male'", "me",
                       fixes).fix_id == "f2"
    assert nearest_fix("KeyError: 'age'", "me", fixes) is None  # too few shared words
    assert nearest_fix("TypeError: could not convert string to float", "me", fixes) is None


def test_policies_recall_each_case_once_in_the_first_root_slots() -> None:
    journal = Journal()
    greedy = GreedyPolicy(num_drafts=3, cases=("c1", "c2"))
    first = greedy.propose(journal, 4, {})
    assert [(p.operator, p.idea) for p in first[:2]] == [(Operator.RECALL, "c1"),
                                                         (Operator.RECALL, "c2")]
    # The cases take two of the three root slots: one generated draft, then nothing until a
    # root comes back.
    assert [p.operator for p in first[2:]] == [Operator.DRAFT]
    journal.add(replace(make_node("r1", operator=Operator.RECALL, metric=-1.0), hint="c1"))
    later = greedy.propose(journal, 2, {(Operator.RECALL, None): 1})
    assert all(p.operator is not Operator.RECALL for p in later)
    # With one root slot (the floor on), a case takes it: the next step improves that root.
    single = GreedyPolicy(num_drafts=1, cases=("c1",))
    assert [p.operator for p in single.propose(Journal(), 3, {})] == [Operator.RECALL]
    ran = Journal()
    ran.add(replace(make_node("r1", operator=Operator.RECALL, metric=-1.0), hint="c1"))
    assert [p.operator for p in single.propose(ran, 1, {})] == [Operator.IMPROVE]
    mcts = MCTSPolicy(num_drafts=3, cases=("c1", "c2")).propose(Journal(), 3, {})
    assert [p.operator for p in mcts] == [Operator.RECALL, Operator.RECALL, Operator.DRAFT]
    assert [p.idea for p in mcts[:2]] == ["c1", "c2"]
    assert [p.operator for p in MCTSPolicy(num_drafts=1, cases=("c1",)).propose(
        Journal(), 2, {})] == [Operator.RECALL, Operator.DRAFT]  # nothing to expand yet


def test_greedy_recalls_the_case_that_did_best_here_once_the_floor_ran_them() -> None:
    def ran(journal: Journal, case_id: str, metric: float | None) -> None:
        status = Status.OK if metric is not None else Status.BUGGY
        journal.add(replace(make_node(f"n-{case_id}", operator=Operator.CASE, status=status,
                                      metric=metric), hint=case_id))

    def first(policy: GreedyPolicy, journal: Journal,
              in_flight: dict[tuple[Operator, str | None], int] | None = None
              ) -> tuple[Operator, str] | None:
        proposals = policy.propose(journal, 1, in_flight or {})
        return (proposals[0].operator, proposals[0].idea) if proposals else None

    policy = GreedyPolicy(num_drafts=1, cases=("c1", "c2", "c3"), recalls=1, case_nodes=True)
    journal = Journal()
    journal.add(make_node("base", operator=Operator.BASELINE, metric=-5.0))
    assert first(policy, journal) is None  # no case has run here yet: the LLM waits
    ran(journal, "c1", -6.0)  # the nearest runs, worse than the baseline root
    assert first(policy, journal) is None
    ran(journal, "c2", -4.0)  # beats it: recalled at once, c3 not waited for
    assert first(policy, journal) == (Operator.RECALL, "c2")
    busy = first(policy, journal, {(Operator.RECALL, None): 1})  # a second LLM worker
    assert busy is not None and busy[0] is Operator.IMPROVE  # one recall only
    journal.add(replace(make_node("r", operator=Operator.RECALL, metric=-4.5), hint="c2"))
    assert (first(policy, journal) or (None,))[0] is Operator.IMPROVE
    # None beats it: the best that ran, once all have; none ran ok: the nearest.
    for outcomes, chosen in (((-6.0, -7.0, None), "c1"), ((None, -7.0, -6.5), "c3"),
                             ((None, None, None), "c1")):
        journal = Journal()
        journal.add(make_node("base", operator=Operator.BASELINE, metric=-5.0))
        for case_id, metric in zip(("c1", "c2", "c3"), outcomes, strict=True):
            assert first(policy, journal) is None
            ran(journal, case_id, metric)
        assert first(policy, journal) == (Operator.RECALL, chosen)
    # Two recalls: the second waits for the first (its case is not in the in-flight key),
    # then takes the next best; a generated draft fills a slot the cases leave.
    two = GreedyPolicy(num_drafts=3, cases=("c1", "c2"), recalls=2, case_nodes=True)
    journal = Journal()
    journal.add(make_node("base", operator=Operator.BASELINE, metric=-5.0))
    assert [p.operator for p in two.propose(journal, 3, {})] == [Operator.DRAFT]
    ran(journal, "c1", -5.5)
    ran(journal, "c2", -4.0)
    proposals = two.propose(journal, 3, {(Operator.DRAFT, None): 1})
    assert [(p.operator, p.idea) for p in proposals] == [(Operator.RECALL, "c2")]
    journal.add(replace(make_node("r2", operator=Operator.RECALL, metric=-4.2), hint="c2"))
    assert first(two, journal, {(Operator.DRAFT, None): 1}) == (Operator.RECALL, "c1")
    # Without case nodes (no floor) the nearest is recalled at once; MCTS recalls the nearest.
    nearest = GreedyPolicy(num_drafts=1, cases=("c1", "c2", "c3"), recalls=1)
    assert first(nearest, Journal()) == (Operator.RECALL, "c1")
    mcts = MCTSPolicy(num_drafts=1, cases=("c1", "c2", "c3"), recalls=1, case_nodes=True)
    proposals = mcts.propose(Journal(), 2, {})
    assert [p.operator for p in proposals] == [Operator.RECALL, Operator.DRAFT]
    assert proposals[0].idea == "c1"


def test_the_summary_says_how_each_case_did_and_which_was_recalled() -> None:
    journal = Journal()
    journal.add(make_node("base", operator=Operator.BASELINE, metric=-5.0))
    for case_id, metric in (("c1", -6.0), ("c2", -4.0)):
        journal.add(replace(make_node(f"n-{case_id}", operator=Operator.CASE, metric=metric),
                            hint=case_id, plan=f"{AS_STORED}: tune code of {case_id}.csv"))
    journal.add(replace(make_node("r", operator=Operator.RECALL, metric=-4.5), hint="c2"))
    record = {"store": "m.sqlite", "fixes": 0,
              "cases": [{"case_id": c, "dataset": f"{c}.csv", "operator": "tune", "gain": 0.1}
                        for c in ("c1", "c2")]}
    lines = memory_section(journal, record, "rmse")
    (first,) = [line for line in lines if line.startswith("- case c1")]
    (second,) = [line for line in lines if line.startswith("- case c2")]
    assert "as stored n-c1 ok, valid rmse -6" in first and first.endswith("not recalled")
    assert "as stored n-c2 ok, valid rmse -4 (beats the baseline)" in second
    assert "recall r ok, valid rmse -4.5 (beats the baseline)" in second


def test_prompts_carry_the_case_and_the_fix() -> None:
    remembered = case("c1", "t1")
    fix = Fix("f1", "t1", "ValueError: could not convert string to float: 'x'",
              "model = Ridge()\nmodel.fit(X, y)", "model = Ridge()\nmodel.fit(X.fillna(0), y)")
    ctx = TaskContext(preview="cols", target="y", task_type="regression", metric="rmse",
                      maximize=False, cases=(remembered,), fixes=(fix,), fingerprint="me")
    journal = Journal()
    recall = build_prompt(ctx, Proposal(Operator.RECALL, idea="c1"), journal)
    assert "# code of c1" in recall.messages[-1]["content"] and recall.tag == "recall"
    journal.add(replace(make_node("bad", operator=Operator.DRAFT, status=Status.BUGGY),
                        error="ValueError: could not convert string to float: 'abc'"))
    debug = build_prompt(ctx, Proposal(Operator.DEBUG, "bad"), journal).messages[-1]["content"]
    assert "+model.fit(X.fillna(0), y)" in debug and "-model.fit(X, y)" in debug


LINEAR = ("A linear model.\n```python\nfrom sklearn.linear_model import Ridge\n\n\n"
          "def fit_predict(X, y, X_valid, X_test):\n"
          "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
          "    model = Ridge(alpha=0.01)\n    model.fit(X, y)\n"
          "    return model.predict(X_valid), model.predict(X_test)\n```\n")
BROKEN = LINEAR.replace("model.fit(X, y)", "model.fit(X[['nope']], y)")


def linear_data(path: Path, columns: list[str], target: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(len(columns), 240))
    frame = pd.DataFrame(dict(zip(columns, x, strict=True)))
    frame[target] = 2 * x[0] - x[1] + 0.05 * rng.normal(size=240)
    frame.to_csv(path, index=False)


def search(tmp: Path, name: str, columns: list[str], target: str, replies: dict,
           memory: Path, drafts: int = 1, floor: bool = False, max_nodes: int = 7) -> Path:
    linear_data(tmp / f"{name}.csv", columns, target, seed=len(name))
    (tmp / f"{name}.json").write_text(json.dumps(replies))
    # Two folds, not five: a written node runs once per fold, and what the memory keeps and
    # recalls does not depend on how many.
    (tmp / f"{name}.yaml").write_text(
        f"data: {name}.csv\ntarget: {target}\nllm: scripted:{name}.json\nnum_drafts: {drafts}\n"
        f"debug_prob: 1.0\nmax_nodes: {max_nodes}\nexecutors: 1\nbudget: 3m\nquiet: true\n"
        "folds: 2\n"
        f"exec_timeout: 120\nfloor: {str(floor).lower()}\nensemble: false\nmemory: {memory}\n")
    assert run_main(["--task", str(tmp / f"{name}.yaml"), "--out", str(tmp / name)]) == 0
    (run,) = [p for p in (tmp / name).iterdir() if not p.name.startswith(".")]
    return run


@pytest.mark.slow  # whole searches, over 20 s: the slow step
def test_runs_remember_and_recall_across_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Only what these runs remember: not the project's shipped memory.
    monkeypatch.setattr("engine.memory.SHIPPED", tmp_path / "none.jsonl")
    store = tmp_path / "memory.sqlite"
    first = search(tmp_path, "first", ["a", "b", "c"], "y",
                   {"draft": [BROKEN], "debug": [LINEAR],
                    "improve": [LINEAR.replace("0.01", f"0.0{i}") for i in (2, 3, 4, 5)]}, store)
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT COUNT(*) FROM tasks").fetchone() == (1,)
        (fixed_error,) = db.execute("SELECT error FROM fixes").fetchone()
        assert "nope" in fixed_error
        assert db.execute("SELECT COUNT(*) FROM cases WHERE gain > 0").fetchone()[0] >= 1
    # Another task (other columns): the first one's winning code runs as stored (the floor,
    # while the LLM writes) and is recalled and adapted by the LLM.
    second = search(tmp_path, "second", ["p", "q", "r", "s"], "t",
                    {"recall": [LINEAR.replace("0.01", "0.3")],
                     "draft": [LINEAR.replace("0.01", "0.5")], "delay": 4}, store, drafts=2,
                    floor=True, max_nodes=14)
    manifest = json.loads((second / "manifest.json").read_text())
    (recalled,) = manifest["memory"]["cases"]
    assert recalled["dataset"] == "first.csv" and manifest["memory"]["fixes"] == 1
    nodes = pd.read_parquet(second / "nodes")
    recall = nodes[nodes.operator == "recall"]
    assert recall.hint.tolist() == [recalled["case_id"]] and recall.status.tolist() == ["ok"]
    assert "Working model code from a similar task" in recall.prompt.iloc[0]
    assert "model = Ridge(alpha=0.0" in recall.prompt.iloc[0]  # the first task's code
    (case,) = nodes[nodes.operator == "case"].itertuples()
    assert case.hint == recalled["case_id"] and case.status == "ok" and case.prompt == ""
    assert case.plan == f"{AS_STORED}: {recalled['operator']} code of first.csv"
    measured = measure(second)  # what benchmarks.memory reports of a run
    assert (measured["recalls"], measured["recalls_ok"]) == (1, 1)
    assert (measured["stored"], measured["stored_ok"], measured["replaced"]) == (1, 1, 0)
    # Two root slots: the case takes one, a generated draft the other.
    assert measured["drafts"] == 2 and measured["first_beat"] is not None
    summary = (second / "summary.md").read_text()
    assert "## Memory" in summary and f"case {recalled['case_id']}" in summary
    assert f"as stored {case.node_id} ok" in summary
    # The first task again (same columns, new rows): it never recalls its own cases.
    again = search(tmp_path, "again", ["a", "b", "c"], "y", {"draft": [LINEAR]}, store)
    memory = json.loads((again / "manifest.json").read_text())["memory"]
    assert memory["fingerprint"] == json.loads(
        (first / "manifest.json").read_text())["memory"]["fingerprint"]
    assert all(c["dataset"] != "first.csv" for c in memory["cases"])
    # The same rows answered twice: benchmarks.memory's paired interval of the test gain.
    interval = answer_gain_interval(first, again)
    assert interval is not None and interval[0] <= interval[1] and max(map(abs, interval)) < 1
    assert answer_gain_interval(first, second) is None  # other test rows: nothing to pair
    # Its answer's test score with each test row left out in turn: one score per row.
    left_out = left_out_scores(first)
    assert left_out is not None
    truth, scores = left_out
    assert len(scores) == len(truth) > 2 and np.isfinite(scores).all() and np.ptp(scores) > 0
    # The command line: show, and a rebuild from the run folders gives the same memory.
    capsys.readouterr()
    assert memory_main(["--memory", str(store), "show"]) == 0
    assert f"{store}: 2 tasks" in capsys.readouterr().out  # first and again: one task
    before = Memory(store).records()
    assert memory_main(["--memory", str(store), "rebuild", str(tmp_path)]) == 0
    assert Memory(store).records() == before
    shipped = tmp_path / "shipped.jsonl"
    assert memory_main(["--memory", str(store), "rebuild", str(tmp_path), "--shipped",
                        "--to", str(shipped)]) == 0
    rebuilt = shipped_records(shipped)
    assert recollect(rebuilt).cases
    # A run added to the shipped file by hand: what it held stays, the run's task joins it.
    only_first = tmp_path / "first.jsonl"
    assert memory_main(["rebuild", str(first), "--shipped", "--to", str(only_first)]) == 0
    assert memory_main(["add", str(second), str(again), "--shipped", "--to",
                        str(only_first)]) == 0
    assert shipped_records(only_first) == rebuilt


def test_a_resumed_run_drops_recalls_of_cases_it_no_longer_retrieves() -> None:
    kept = Case("c1", "other", "other.csv", "regression", {}, "tune", "rmse", 0.2, "code")
    requeue = [Proposal(Operator.RECALL, idea="c1"), Proposal(Operator.RECALL, idea="gone"),
               Proposal(Operator.CASE, idea="gone"), Proposal(Operator.DRAFT, idea="gone"),
               Proposal(Operator.CASE, idea="c1")]  # the floor proposes it again, sized
    assert still_recalled(requeue, (kept,)) == [requeue[0], requeue[3]]


def test_memory_off_and_a_bad_store_say_so(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert memory_main(["--memory", "off", "show"]) == 2
    assert "memory is off" in capsys.readouterr().err
    assert memory_main(["--memory", str(tmp_path / "x.sqlite"), "add", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_the_paired_table_counts_tasks_where_memory_helped() -> None:
    def arm(first_beat: list[float | None], tests: list[float], ok: int,
            stored: list[int]) -> pd.DataFrame:
        return pd.DataFrame({"task": ["a", "b", "c"], "split_seed": 0, "seed": 0, "metric": "rmse",
                             "test": tests, "drafts_ok": ok, "drafts": 2, "recalls_ok": ok,
                             "recalls": 1, "replaced": [0, ok, 0], "replaced_ok": [0, ok, 0],
                             "stored": stored, "stored_ok": stored, "stored_beat": [0, 0, 0],
                             "first_beat": first_beat, "run_dir": None})
    text = table(arm([100.0, None, 50.0], [1.0, 2.0, 3.0], 0, [0, 0, 0]),
                 arm([40.0, 90.0, 60.0], [0.9, 2.0, 3.5], 1, [0, 0, 1]))
    assert "sooner with memory on 2 of 3 tasks, later on 1" in text
    assert "better with memory on 1 of 3 tasks, worse on 1" in text  # rmse: lower is better
    # No runs to resample here: no interval, and none counted beyond one.
    assert "| 1 | 0.9 | n/a |" in text and "better on 0, worse on 0" in text
    assert "off 0/6 (0%;" in text and "on 3/6 (50%;" in text and "| never |" in text
    assert "spread off" not in text  # one seed: no run-to-run table
    assert "| 1/2 (1/1; as stored 1/1) |" in text and "| 1/2 (1/1) |" in text
    assert "replaced the case's model (counted above as they ran): 1 of 3; ran ok 1" in text
    assert "cases run as stored (engine-run, not drafts): 1; ran ok 1, beat the baseline root 0" \
        in text
    recall = make_node("r", operator=Operator.RECALL, metric=-1.0)
    case = replace(recall, operator=Operator.CASE, plan=f"{AS_STORED}: tune code of a.csv")
    assert not as_stored(recall) and as_stored(case)
    # a recall of an older run whose reply was set aside for the case's own code
    assert as_stored(replace(recall, plan=f"{AS_STORED}: the reply replaced its Ridge"))


def test_two_seeds_set_the_memory_gain_against_each_arms_own_spread() -> None:
    def arm(tests: dict[str, list[float]]) -> pd.DataFrame:
        return pd.DataFrame([{"task": task, "split_seed": 0, "seed": seed, "metric": "rmse",
                              "test": test, "drafts_ok": 1, "drafts": 1, "recalls_ok": 0,
                              "recalls": 0, "replaced": 0, "replaced_ok": 0, "stored": 0,
                              "stored_ok": 0, "stored_beat": 0, "first_beat": None,
                              "run_dir": None}
                             for task, by_seed in tests.items()
                             for seed, test in enumerate(by_seed)])
    text = table(arm({"a": [1.0, 1.2], "b": [2.0, 2.5], "c": [1.0]}),
                 arm({"a": [0.8, 0.9], "b": [2.6, 2.3], "c": [0.5]}))
    # a: means 1.1 -> 0.85 (rmse: +0.25) beyond spreads 0.2 and 0.1; b: 2.25 -> 2.45 (-0.2)
    # within the off arm's 0.5; c has one seed and is left out.
    # No runs here: nothing to leave a test row out of, so no gain counts as steady.
    assert "| a | 1 / 1.2 | 0.8 / 0.9 | +0.25 | n/a | 0.2 | 0.1 | n/a | n/a |" in text
    assert "| b | 2 / 2.5 | 2.6 / 2.3 | -0.2 | n/a | 0.5 | 0.3 |" in text
    assert "| c | 1 / " not in text
    assert "better on 1 of 2 tasks, worse on 0; still beyond it without the test row that " \
        "moves the gain most: better on 0, worse on 0" in text
    assert "interval on 0 of 0 pairs" in text
    # Another test split of task a is its own group, seeds and all.
    split = arm({"a": [1.0, 1.1]}).assign(split_seed=2)
    text = table(pd.concat([arm({"a": [1.0, 1.2]}), split]),
                 pd.concat([arm({"a": [0.8, 0.9]}), split.assign(test=[1.3, 1.2])]))
    assert "| a | 1 / 1.2 | 0.8 / 0.9 | +0.25 |" in text
    assert "| a, split 2 | 1 / 1.1 | 1.3 / 1.2 | -0.2 |" in text and "| 1, split 2 | rmse |" in text
    assert "better on 1 of 2 tasks, worse on 1;" in text


def test_a_gain_without_one_test_row_leaves_out_the_row_that_moves_it_most() -> None:
    # Each seed's rmse with row i left out; on is better (lower) without rows 0 and 1, worse
    # without row 2: its gain rests on row 2.
    off = [np.array([1.0, 1.0, 1.0]), np.array([1.2, 1.2, 1.2])]
    on = [np.array([0.9, 0.9, 1.3]), np.array([0.9, 0.9, 1.3])]
    assert gain_without_one_row("rmse", +0.05, off, on) == pytest.approx(-0.2)
    assert gain_without_one_row("rmse", -0.05, off, on) == pytest.approx(+0.2)
    # roc_auc is maximised: the gain is on's minus off's as they are.
    assert gain_without_one_row("roc_auc", +0.01, [np.array([0.8, 0.7])],
                                [np.array([0.85, 0.72])]) == pytest.approx(0.02)


def test_the_paired_table_takes_its_arms_in_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        paired_main(["off", "on", "off2"])
    assert stopped.value.code == 2
    assert "3 folders: give them in pairs, OFF ON [OFF ON ...]" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        paired_main(["off", "on"])
    assert stopped.value.code == 2
    assert "off holds no results.parquet: give benchmarks.run --out folders" \
        in capsys.readouterr().err


def test_code_that_names_its_tasks_columns_is_no_case() -> None:
    assert names_a_column("X['v'] = np.log1p(X['v'])", ["v", "loc"])
    assert names_a_column('X["loc"] * 2', ["v", "loc"])
    assert not names_a_column("model = Ridge(alpha=0.1)  # 'alpha'", ["v", "loc"])


def test_code_that_applies_feature_programs_is_no_case() -> None:
    # A feature program names this task's columns (here only through df, which the column
    # check cannot see): code that applies one is no case, whatever it names.
    from engine.memory import _cases
    from operators.harness import assemble
    from operators.models import model_code

    ctx = TaskContext(preview="", target="y", task_type="regression", metric="rmse",
                      maximize=False)
    program = "def add_features(df):\n    return df.assign(total=df.sum(axis=1))\n"

    def tune(node_id: str, metric: float, programs: list[str], feature_set: str) -> Node:
        code = assemble(ctx, model_code(ctx, "linear", {"alpha": metric}, programs))
        return replace(make_node(node_id, operator=Operator.TUNE, metric=metric, code=code),
                       feature_set=feature_set)

    base = make_node("base", operator=Operator.BASELINE, metric=0.5)
    plain = tune("plain", 0.6, [], "")
    on_set = tune("on_set", 0.9, [program], "f")
    journal = Journal([base, plain, on_set])
    stored = _cases(journal, "mark", "rmse", ["a", "b"])
    assert [c["code"] for c in stored] == [model_part(plain.code).strip()]
    assert "FEATURE_PROGRAMS" in on_set.code and not names_a_column(on_set.code, ["a", "b"])
    # the same code recorded on no feature set would be stored, best first
    journal = Journal([base, plain, replace(on_set, feature_set="")])
    assert len(_cases(journal, "mark", "rmse", ["a", "b"])) == 2


def test_the_shipped_memory_is_read_with_the_users(tmp_path: Path) -> None:
    shipped = recollect(shipped_records())
    assert len(shipped.cases) >= 6 and {c.task_type for c in shipped.cases} == {
        "regression", "binary", "multiclass"}
    assert all(c.gain > 0 and "def fit_predict" in c.code for c in shipped.cases)
    both = recall(tmp_path / "empty.sqlite")
    assert {c.case_id for c in both.cases} == {c.case_id for c in shipped.cases}


def test_runs_add_to_the_shipped_memory_and_keep_what_it_held(tmp_path: Path) -> None:
    shipped = tmp_path / "shipped.jsonl"
    shipped.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in shipped_records()))
    before = shipped_records(shipped)
    task = {"fingerprint": "new", "dataset": "new.csv", "task_type": "binary",
            "metric": "roc_auc", "meta": {"log_rows": 3.5}}
    run = RunMemory("r1", "new", task,
                    [{"case_id": "k1", "fingerprint": "new", "operator": "tune",
                      "metric": "roc_auc", "gain": 0.02, "code": "def fit_predict(): ..."}],
                    [{"fix_id": "f1", "fingerprint": "new", "error": "KeyError: x",
                      "failed": "a", "fixed": "b"}])
    write_shipped(shipped, [run], shipped_records(shipped))
    after = shipped_records(shipped)
    assert [r for r in after if r.get("fingerprint") != "new"] == before  # kept as it was
    assert {(r["kind"], r.get("case_id", r.get("fix_id"))) for r in after
            if r["fingerprint"] == "new"} == {("task", None), ("case", "k1"), ("fix", "f1")}
    write_shipped(shipped, [run], shipped_records(shipped))  # added twice: held once
    assert shipped_records(shipped) == after
    write_shipped(shipped, [run], keep=[])  # a rebuild: only the runs given
    assert len(shipped_records(shipped)) == 3


def test_the_memory_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV, "off")
    assert resolve(None) is None and resolve("off") is None
    assert resolve(str(tmp_path / "m.sqlite")) == tmp_path / "m.sqlite"  # a flag beats the env
    monkeypatch.setenv(ENV, str(tmp_path / "env.sqlite"))
    assert resolve("") == tmp_path / "env.sqlite"
    monkeypatch.delenv(ENV)
    assert resolve(None) == default_path()
