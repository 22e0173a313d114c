"""benchmarks.debug_pairs: failed nodes of real runs debugged in both arms, run in the real
sandbox and scored; an LLM that only fixes code when its prompt holds a reflection must show
up as reflect fixing every parent and plain none. Also benchmarks.analysis, which shares its
in-process LLM."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from benchmarks.analysis import main as analysis_main
from benchmarks.debug_pairs import (
    load_cases,
    main,
    read_attempts,
    replay,
    spread,
    summary,
    table,
)
from benchmarks.stats import paired_interval, share, sign_test, wilson
from common.chat import ChatPrompt, Reply
from engine.evaluation.select import resample_counts
from engine.run import main as run_main
from tests.helpers import make_data

GOOD = ("Linear model.\n```python\nfrom sklearn.linear_model import Ridge\n\n\n"
        "def fit_predict(X, y, X_valid, X_test):\n"
        "    X, X_valid, X_test = prepare(X, X_valid, X_test)\n"
        "    model = Ridge().fit(X, y)\n"
        "    return model.predict(X_valid), model.predict(X_test)\n```\n")
BAD = GOOD.replace("prepare(X, X_valid, X_test)\n",
                   "prepare(X, X_valid, X_test)\n    X = X[['no_such_column']]\n")
BAD2 = BAD.replace("Ridge()", "Ridge(alpha=2.0)")  # a second, distinct failed draft
NOTE = "The column no_such_column does not exist: use every prepared column."


class NeedsNotes:
    """Fixes the code only when the debug prompt carries a reflection."""

    model = "fake"

    def __init__(self) -> None:
        self.prompts: list[ChatPrompt] = []

    def generate(self, prompts: list[ChatPrompt]) -> list[Reply]:
        self.prompts.extend(prompts)
        (prompt,) = prompts
        text = prompt.messages[-1]["content"]
        if prompt.tag == "reflect":
            reply = NOTE
        else:
            reply = GOOD if "# Your notes on this code" in text else BAD
        return [Reply(reply, len(text.split()), len(reply.split()), 0.01, self.model)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run whose two drafts failed (and whose debug steps failed too)."""
    tmp = tmp_path_factory.mktemp("pairs")
    make_data(tmp / "train.csv")
    (tmp / "replies.json").write_text(json.dumps({"draft": [BAD, BAD2], "debug": [BAD]}))
    (tmp / "task.yaml").write_text("num_drafts: 2\ndebug_prob: 1.0\n")
    assert run_main(["--data", str(tmp / "train.csv"), "--target", "y", "--llm",
                     f"scripted:{tmp / 'replies.json'}", "--max-nodes", "3", "--executors",
                     "1", "--no-baseline", "--quiet", "--out", str(tmp / "runs"),
                     "--task", str(tmp / "task.yaml"),
                     # The replays score each fixed attempt on the run's folds: the holdout is
                     # one sandbox run per attempt, and fixed or not reads the same there.
                     "--folds", "1"]) == 0
    return tmp / "runs"


def test_reflection_that_helps_shows_in_every_pair(runs: Path, tmp_path: Path) -> None:
    cases = load_cases([runs])
    # The two drafts and the debug step failed with code; identical code counts once.
    assert len(cases) == 2
    assert {c.parent.operator.value for c in cases} == {"draft"}
    llm = NeedsNotes()
    attempts = replay(cases, llm, tmp_path, samples=2)
    assert len(attempts) == 2 * 2 * 2
    for a in attempts:
        assert a["fixed"] == (a["arm"] == "reflect"), a
        assert (a["metric_raw"] is not None) == a["fixed"]
        assert (a["reflection"] == NOTE) == (a["arm"] == "reflect")
    # Plain failed twice: the second time the reply parsed, so the failure is the KeyError.
    assert all("no_such_column" in a["error"] for a in attempts if a["arm"] == "plain")
    # A reflect attempt is two calls, the same prefix, then the debug prompt with the note.
    debug_prompts = [p for p in llm.prompts if p.tag == "debug"]
    assert len(debug_prompts) == 8 and len([p for p in llm.prompts if p.tag == "reflect"]) == 4
    s = summary(attempts)
    assert (s["parents"], s["reflect_better"], s["reflect_worse"]) == (2, 2, 0)
    assert s["p_value"] == pytest.approx(0.5)
    text = table(attempts)
    assert "| **all** | 2 | 0/4 (0%;" in text and "| 4/4 (100%;" in text
    # Resume: nothing is asked again.
    before = len(llm.prompts)
    assert replay(cases, llm, tmp_path, samples=2) == read_attempts(tmp_path / "attempts.jsonl")
    assert len(llm.prompts) == before


def test_cli_with_a_scripted_llm_and_bad_input(runs: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"reflect": [NOTE], "debug": [GOOD]}))
    out = tmp_path / "out"
    assert main([str(runs), "--llm", f"scripted:{replies}", "--max-parents", "1",
                 "--out", str(out)]) == 0
    attempts = read_attempts(out / "attempts.jsonl")
    assert [a["arm"] for a in attempts] == ["plain", "reflect"]
    assert all(a["fixed"] for a in attempts)
    assert "| **all** | 1 | 1/1" in (out / "debug_pairs.md").read_text()
    capsys.readouterr()
    assert main([str(tmp_path / "replies.json"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert main([str(runs), "--samples", "0"]) == 2


def test_statistics() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 0) == pytest.approx(2 / 32)
    assert sign_test(3, 3) == 1.0
    low, high = wilson(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-3) and high == pytest.approx(0.7634, abs=1e-3)
    assert wilson(0, 0) == (0.0, 1.0)
    assert share(5, 10) == "5/10 (50%; 24%–76%)" and share(0, 0) == "0/0"
    # Paired rows whose gain is 0.1 plus noise, scored as mean gains on the same bootstrap
    # resamples: the interval holds 0.1 and not 0; with noise ten times wider it spans 0.
    rng = np.random.default_rng(1)
    counts = resample_counts(400, 2000)
    for noise, spans_zero in ((0.2, False), (2.0, True)):
        off = rng.normal(size=400)
        on = off + 0.1 + noise * rng.normal(size=400)
        low, high = paired_interval(counts @ off / 400, counts @ on / 400, maximize=True)
        assert low < 0.1 < high and (low < 0 < high) == spans_zero
        # lower is better: the same scores read the other way round
        assert paired_interval(counts @ on / 400, counts @ off / 400,
                               maximize=False) == (low, high)


def test_spread_takes_tasks_in_turn(runs: Path) -> None:
    a1, a2 = load_cases([runs])
    b1 = replace(a1, task_name="other")
    assert spread([a1, b1, a2], 2) == [a1, b1]
    # Grouped by task, in the order tasks first appear.
    assert spread([a1, b1, a2], None) == [a1, a2, b1]


def test_analysis_benchmark_runs_the_scripts(tmp_path: Path) -> None:
    """benchmarks.analysis: each reply's script runs in the sandbox after the engine's head
    (so `df` and `target` exist); a script that crashes or prints nothing does not count."""
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"analyze": [
        "```python\nprint('rows', len(df), 'skew', round(df[target].skew(), 2))\n```",
        "```python\nprint(undefined_frame.shape)\n```",
        "```python\nx = len(df)\n```"]}))
    out = tmp_path / "out"
    assert analysis_main(["--suite", "concrete-strength", "--samples", "3", "--llm",
                          f"scripted:{replies}", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert [r["ok"] for r in rows] == [True, False, False]
    assert rows[0]["findings"].startswith("rows 618 skew")
    assert "undefined_frame" in rows[1]["error"] and "printed nothing" in rows[2]["error"]
    assert "| **all** | 1/3 (33%;" in (out / "analysis.md").read_text()
    assert analysis_main(["--samples", "0", "--out", str(out)]) == 2
