"""summary.md from hand-built journals: the feature programs section and the LLM line, and the
log's line when the LLM is asked for no more (pure, no search, milliseconds)."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from rich.console import Console

from engine.budget import Budget
from engine.progress import Progress
from engine.records.summary import summary_facts, write_summary
from engine.task.prepare import PreparedTask, TaskSpec, prepare_task
from search.journal import Journal
from search.node import Node, Operator, Status
from search.programs import REJECTED, Gate
from tests.helpers import make_node


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> PreparedTask:
    data = tmp_path_factory.mktemp("summary") / "d.csv"
    data.write_text("a,b,y\n" + "".join(f"{i},{i % 5},{i % 7 * 2.5}\n" for i in range(60)))
    return prepare_task(TaskSpec(data, "y"))


def program(node_id: str, gate: Gate | None, *, metric: float = 1.0, llm: float = 3.0,
            status: Status = Status.OK, error: str = "") -> Node:
    node = make_node(node_id, operator=Operator.FEATURES, metric=metric, status=status)
    return dataclasses.replace(node, gate=gate.to_json() if gate else "", error=error,
                               llm_seconds=llm, feature_set=node_id)


def tuned(node_id: str, feature_set: str, metric: float) -> Node:
    node = make_node(node_id, operator=Operator.TUNE, metric=metric)
    return dataclasses.replace(node, feature_set=feature_set)


def summary(tmp_path: Path, task: PreparedTask, journal: Journal, **facts: object) -> str:
    gathered = summary_facts(journal, {}, {}) | facts
    return write_summary(tmp_path, task, journal, {}, gathered).read_text()


KEPT = Gate("p0", (0.02, 0.01, 0.03, 0.01, 0.001), True,
            "kept: better on 5 of 5 groups, mean gain +0.0142", ("a_per_b", "a_mod_b"))
NOT_KEPT = Gate("p0", (0.01, -0.02, 0.0, 0.0, 0.0), False,
                "not kept: better on 1 of 5 groups, mean gain -0.002 (needs every group "
                "better: 5 of 5)", ("b_squared",))


def journal_with_programs(answer_on_kept: bool) -> Journal:
    journal = Journal([
        make_node("p0", operator=Operator.PORTFOLIO, metric=0.80),
        program("f1", KEPT, metric=0.85, llm=4.0),
        program("f2", NOT_KEPT, metric=0.79, llm=2.0),
        program("f3", None, status=Status.BUGGY, llm=1.0,
                error=f"{REJECTED} it reads the target column 'y'"),
        program("f4", None, status=Status.TIMEOUT, llm=9.0, error="timed out"),
        tuned("t1", "f1" if answer_on_kept else "", 0.90),
    ])
    journal.choose("t1")
    return journal


def test_feature_programs_section_counts_and_lists_the_kept_ones(tmp_path: Path,
                                                                 task: PreparedTask) -> None:
    text = summary(tmp_path, task, journal_with_programs(answer_on_kept=True))
    assert "## Feature programs" in text
    # 4 proposed: f3 refused by the checks, f4 failed, f1 and f2 scored, f1 kept; the median
    # of 1, 2, 4 and 9 LLM seconds is 3.
    assert ("- 4 proposed: 1 refused by the checks, 1 failed, 2 scored, 1 kept; median LLM "
            "seconds per program 3.0") in text
    assert "- the answer (t1, tune) uses kept program f1" in text
    assert ("| f1 | a_per_b, a_mod_b | +0.0142 | kept: better on 5 of 5 groups, mean gain "
            "+0.0142 |") in text
    assert "b_squared" not in text  # only kept programs are listed


def test_an_answer_without_a_kept_program_says_so(tmp_path: Path, task: PreparedTask) -> None:
    text = summary(tmp_path, task, journal_with_programs(answer_on_kept=False))
    assert "- the answer (t1, tune) uses no kept program" in text


def test_when_the_llm_was_asked_for_no_more_programs(tmp_path: Path,
                                                     task: PreparedTask) -> None:
    journal = journal_with_programs(answer_on_kept=False)
    why = "10 feature programs in a row were not kept"
    text = summary(tmp_path, task, journal, llm_retired_seconds=152.4, llm_retired_why=why)
    assert ("- the LLM was asked for no more at 152s (10 feature programs in a row were not "
            "kept); its CPUs ran the floor's trials from then on") in text
    assert "asked for no more" not in summary(tmp_path, task, journal, llm_retired_seconds=None)


def test_the_log_tells_once_when_the_llm_was_asked_for_no_more(task: PreparedTask) -> None:
    console = Console(file=io.StringIO(), width=200)
    progress = Progress(console, task, Journal(), Budget(600))
    why = "3 of 8 scored feature programs were better than their reference"
    progress.llm_retired(152.4, why)
    progress.llm_retired(160.0, why)  # every later node asks again
    assert console.file.getvalue().splitlines() == [
        "[   152s] the LLM is asked for no more (3 of 8 scored feature programs were better "
        "than their reference); its CPUs run the floor's trials from now on"]


def test_an_ensemble_uses_its_weighted_members_programs_kept_or_not(
        tmp_path: Path, task: PreparedTask) -> None:
    """An ensemble's programs are those of the members it weights (its plan), not of every
    candidate (its hint); a program's own node that was not kept, picked by ensemble
    selection like any scored model, is named with its share of the weight."""
    journal = journal_with_programs(answer_on_kept=False)
    on_kept, unkept = "0000000000b2", "0000000000c3"
    journal.add(tuned(on_kept, "f1", 0.88))
    journal.add(program(unkept, NOT_KEPT, metric=0.86))

    def blend(node_id: str, candidates: str, plan: str) -> Node:
        return dataclasses.replace(make_node(node_id, operator=Operator.ENSEMBLE, metric=0.95),
                                   hint=candidates, plan=f"ensemble selection over 3 nodes: {plan}")

    journal.add(blend("e1", f"t1,{on_kept},{unkept}", f"{on_kept} x3, {unkept} x1"))
    journal.choose("e1")
    assert ("- the answer (e1, ensemble) uses kept program f1; 25% of its weight is on programs "
            f"that were not kept ({unkept})") in summary(tmp_path, task, journal)
    journal.add(blend("e2", f"t1,{on_kept},{unkept}", f"{unkept} x2"))
    journal.choose("e2")
    assert ("- the answer (e2, ensemble) uses no kept program; 100% of its weight is on "
            f"programs that were not kept ({unkept})") in summary(tmp_path, task, journal)


def test_a_program_not_kept_uses_the_kept_set_it_was_proposed_on(
        tmp_path: Path, task: PreparedTask) -> None:
    """A program's node that was not kept trains on the kept set it extends (its parent): an
    answer on it uses that set's programs too (penguins' fold 0 at `3006779` said "uses no
    kept program" for such an answer on a chain of three kept programs)."""
    journal = journal_with_programs(answer_on_kept=False)
    on_kept = dataclasses.replace(program("0000000000d4", NOT_KEPT, metric=0.97),
                                  parent_id="f1")
    journal.add(on_kept)
    journal.choose(on_kept.node_id)
    assert ("- the answer (0000000000d4, features) uses kept program f1; 100% of its weight is "
            "on programs that were not kept (0000000000d4)") in summary(tmp_path, task, journal)


def test_no_programs_no_section_and_the_llm_line(tmp_path: Path, task: PreparedTask) -> None:
    journal = Journal([make_node("p0", operator=Operator.PORTFOLIO, metric=0.8)])
    text = summary(tmp_path, task, journal, llm="none")
    assert "Feature programs" not in text
    assert "- LLM: none: the engine's floor alone (no LLM started, no prompt written)" in text
    assert "- LLM: `llama`" in summary(tmp_path, task, journal, llm="llama")


def configured(node_id: str, operator: Operator, family: str, metric: float,
               status: Status = Status.OK) -> Node:
    node = make_node(node_id, operator=operator, metric=metric, status=status)
    hint = "" if operator is Operator.BASELINE else (
        f'{{"name": "{family}", "family": "{family}", "params": {{}}}}')
    return dataclasses.replace(node, hint=hint, metric_raw=abs(metric) if ok(status) else None)


def ok(status: Status) -> bool:
    return status is Status.OK


def test_the_summary_names_each_model_familys_best_score(tmp_path: Path,
                                                        task: PreparedTask) -> None:
    journal = Journal([
        configured("b0", Operator.BASELINE, "", -5.0),
        configured("p1", Operator.PORTFOLIO, "catboost", -4.5),
        configured("t1", Operator.TUNE, "lgbm", -4.2),
        configured("t2", Operator.TUNE, "lgbm", -4.8),
        configured("t3", Operator.TUNE, "knn", -9.0, status=Status.BUGGY),  # not ok: not named
        configured("r0", Operator.TUNE, "ridge", 0.0),  # a perfect score stays the best
        configured("r1", Operator.TUNE, "ridge", -3.0),
        program("f1", KEPT, metric=-1.0),  # a program's node is not a family's trial
    ])
    line = next(line for line in summary(tmp_path, task, journal).splitlines()
                if line.startswith("- best valid by model family:"))
    assert line == ("- best valid by model family: ridge 0 (node r0, 2 ok), lgbm 4.2 (node t1, "
                    "3 ok), catboost 4.5 (node p1, 1 ok)")
