"""Feature programs as text (operators/features.py, operators/kinds/features.py): the checks a
program passes before it runs, its prompt and the code that applies a chain of programs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from operators.context import TaskContext
from operators.features import (
    IMPORTANCES,
    IMPORTANCES_SHOWN,
    check_program,
    completed,
    feature_programs,
    program_source,
    programs_block,
    reported_importances,
    with_column_names,
    without_columns,
    without_text_arithmetic,
)
from operators.kinds import kind_of
from operators.kinds.features import STOP
from operators.models import model_code
from operators.prepare_source import PREPARE_SOURCE
from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import Proposal
from search.programs import REJECTED, Gate
from tests.helpers import make_node

COLUMNS = ("rooms", "area", "built", "city")
GOOD = ('def add_features(df):\n'
        '    df["area_per_room"] = df["area"] / (df["rooms"] + 1e-9)\n    return df\n')

# Each planted program tries to reach what a program must never see: the target, the test
# rows, a label file, the interpreter. Every one is refused on its text, before it runs.
PLANTED = {
    "target by name": 'def add_features(df):\n    df["t"] = df["price"] * 2\n    return df\n',
    "target assigned": 'def add_features(df):\n    df["price"] = 0\n    return df\n',
    "test rows": ('import pandas as pd\n\ndef add_features(df):\n'
                  '    test = pd.read_csv("input/test.csv")\n'
                  '    df["n"] = len(test)\n    return df\n'),
    "label file": ('def add_features(df):\n    labels = open("../task/valid_labels.csv").read()\n'
                   '    df["n"] = len(labels)\n    return df\n'),
    "os import": ('import os\n\ndef add_features(df):\n'
                  '    df["n"] = len(os.listdir("."))\n    return df\n'),
    "dunder import": ('def add_features(df):\n    pd = __import__("pandas")\n'
                      '    df["n"] = len(pd.read_csv("input/train.csv"))\n    return df\n'),
    "getattr": ('import pandas as pd\n\ndef add_features(df):\n'
                '    r = getattr(pd, "read_" + "csv")\n    df["n"] = len(r("input/train.csv"))\n'
                '    return df\n'),
    "introspection": ('def add_features(df):\n    g = add_features.__globals__\n'
                      '    df["n"] = len(g)\n    return df\n'),
    "eval": 'def add_features(df):\n    df["n"] = eval("1")\n    return df\n',
    "numpy file": ('import numpy as np\n\ndef add_features(df):\n'
                   '    df["n"] = np.loadtxt("input/train.csv", delimiter=",", skiprows=1)[:, 0]\n'
                   '    return df\n'),
    "pandas io": ('import pandas as pd\n\ndef add_features(df):\n'
                  '    df["n"] = len(pd.io.parsers.read_csv("input/test.csv"))\n'
                  '    return df\n'),
    "module-level code": ('x = open("input/test.csv").read()\n\n'
                          'def add_features(df):\n    return df\n'),
}


@pytest.mark.parametrize("name", list(PLANTED))
def test_planted_programs_are_refused_on_their_text(name: str) -> None:
    problem = check_program(PLANTED[name], COLUMNS, "price")
    assert problem, f"{name} passed the checks"


@pytest.mark.parametrize(("source", "fragment"), [
    ("def add_features(df)\n    return df\n", "does not parse"),
    ("def features(df):\n    return df\n", "defines no add_features"),
    ('def add_features(df):\n    df["x"] = df["floor"] * 2\n    return df\n',
     "column 'floor'"),
    ('import sklearn\n\ndef add_features(df):\n    return df\n', "imports 'sklearn'"),
])
def test_a_refusal_says_why(source: str, fragment: str) -> None:
    assert fragment in check_program(source, COLUMNS, "price")


def test_a_good_program_passes_and_may_read_the_columns_it_made() -> None:
    chained = ('import numpy as np\n\ndef add_features(df):\n'
               '    df = df.assign(age=2024 - df["built"])\n'
               '    df["old"] = np.where(df["age"] > 30, 1, 0)\n'
               '    df["city_len"] = df["city"].str.len()\n    return df\n')
    assert check_program(GOOD, COLUMNS, "price") == ""
    assert check_program(chained, COLUMNS, "price") == ""


def test_a_program_cut_at_the_token_cap_keeps_its_whole_statements() -> None:
    cut = ('def add_features(df):\n    df["a"] = df["area"] / (df["rooms"] + 1e-9)\n'
           '    df["b"] = df["area"] * 2\n    df["c"] = (df["built"')
    program = completed(cut)
    assert program == ('def add_features(df):\n    df["a"] = df["area"] / (df["rooms"] + 1e-9)\n'
                       '    df["b"] = df["area"] * 2\n    return df\n')
    assert check_program(program, COLUMNS, "price") == ""
    assert completed(GOOD) == GOOD
    forgot = 'def add_features(df):\n    df["b"] = df["area"] * 2\n'
    assert completed(forgot) == forgot + "    return df\n"
    # Cut inside `return df`: a bare return hands back None (2 of a wine run's 15 programs).
    assert completed(forgot + "    return") == forgot + "    return df\n"
    assert completed("not python at all (") == "not python at all ("


def test_a_column_spelled_another_way_is_spelled_as_the_rows_spell_it() -> None:
    columns = ("fixed acidity", "residual sugar", "pH")
    program = ('def add_features(df):\n'
               '    df["acid_sugar"] = df["fixed_acidity"] / (df[\'Residual_Sugar\'] + 1e-9)\n'
               '    df["ph2"] = df["PH"] * 2\n    df["x"] = df["density"]\n    return df\n')
    fixed = with_column_names(program, columns)
    assert "df['fixed acidity'] / (df['residual sugar'] + 1e-9)" in fixed
    assert "df['pH'] * 2" in fixed and 'df["density"]' in fixed  # unknown: left to the check
    assert "'density'" in check_program(fixed, columns, "quality")


def test_a_shortened_column_name_is_the_one_column_it_begins() -> None:
    columns = ("fixed acidity", "volatile acidity", "free sulfur dioxide",
               "total sulfur dioxide", "pH")
    program = ('def add_features(df):\n'
               '    df["r"] = df["volatile_acid"] / (df["fixed_acid"] + 1e-9)\n'
               '    df["s"] = df["sulfur"] + df["ph"] + df["p"]\n'
               '    df["t"] = df["r"] * df["r_x"]\n    return df\n')
    fixed = with_column_names(program, columns)
    assert "df['volatile acidity'] / (df['fixed acidity'] + 1e-9)" in fixed
    # "sulfur" begins no column (free_/total_ do), "p" is too short to tell, and "r_x" is
    # left alone although the program writes "r": only the rows' columns are looked for
    assert 'df["sulfur"]' in fixed and "df['pH']" in fixed and 'df["p"]' in fixed
    assert 'df["r_x"]' in fixed
    assert with_column_names(program.replace("fixed_acid", "acid"), columns).count(
        '"acid"') == 1  # begins no column


def test_the_program_is_read_from_its_block() -> None:
    reply = f"Here it is:\n```python\n{GOOD}```\nIt adds a ratio."
    assert program_source(reply) == GOOD
    assert program_source(GOOD) == GOOD


def test_a_chain_is_read_back_from_the_code_that_applies_it() -> None:
    ctx = TaskContext(preview="p", target="price", task_type="regression", metric="rmse",
                      maximize=False, columns=COLUMNS)
    code = model_code(ctx, "lgbm", {"n_estimators": 10}, [GOOD, GOOD.replace("area_per", "x")])
    assert feature_programs(code) == [GOOD, GOOD.replace("area_per", "x")]
    assert feature_programs(model_code(ctx, "lgbm", {"n_estimators": 10})) == []
    assert "with_features" not in model_code(ctx, "lgbm", {"n_estimators": 10})


# What the harness's head gives the model part: its imports, the target, apply_programs.
HEAD = ("import re\nimport numpy as np\nimport pandas as pd\nTARGET = 'price'\n"
        "_treeml_main = True\n" + PREPARE_SOURCE)


def _run_check(program: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The sandboxed script's check, run on a small frame in a child process."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"rooms": rng.integers(1, 6, 40), "area": rng.uniform(20, 200, 40),
                          "built": rng.integers(1950, 2020, 40), "city": ["a", "bb"] * 20})
    frame.to_csv(tmp_path / "x.csv", index=False)
    script = (HEAD + "X = pd.read_csv('x.csv')\n"
              + programs_block([GOOD, program], check=True))
    return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize(("program", "why"), [
    ('def add_features(df):\n    df["r"] = df["area"].rank()\n    return df\n', "other rows"),
    ('def add_features(df):\n    df["m"] = df["area"] - df["area"].mean()\n    return df\n',
     "other rows"),
    ('def add_features(df):\n    return df.iloc[:10]\n', "rows for"),
    ('import numpy as np\n\ndef add_features(df):\n    df["x"] = np.nan\n    return df\n',
     "missing"),
    ('def add_features(df):\n    return df\n', "no column"),
    ('def add_features(df):\n    df["t"] = df[chr(112) + "rice"]\n    return df\n',
     "reads the target"),
    ('def add_features(df):\n    return df.values\n', "not the DataFrame"),
])
def test_the_rows_check_refuses_before_any_model(program: str, why: str,
                                                 tmp_path: Path) -> None:
    done = _run_check(program, tmp_path)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert REJECTED in last and why in last, last


def test_the_rows_check_reports_what_a_good_program_added(tmp_path: Path) -> None:
    done = _run_check('def add_features(df):\n    df["old"] = (2024 - df["built"]) > 30\n'
                      '    return df\n', tmp_path)
    assert done.returncode == 0, done.stderr
    assert '__treeml_features__ {"added": ["old"]}' in done.stdout
    # dropping a column is a change too (an identifier that carries no signal)
    done = _run_check('def add_features(df):\n    return df.drop(columns=["city"])\n', tmp_path)
    assert done.returncode == 0 and '{"added": ["-city"]}' in done.stdout, done.stderr


@pytest.mark.parametrize("model", ["DecisionTreeRegressor(random_state=0)",
                                   "make_pipeline(StandardScaler(), Ridge())"])
def test_the_fitted_model_reports_what_it_relies_on_once(model: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"rooms": rng.integers(1, 6, 80), "area": rng.uniform(20, 200, 80),
                          "built": rng.integers(1950, 2020, 80)})
    frame.to_csv(tmp_path / "x.csv", index=False)
    script = (HEAD + "from sklearn.linear_model import Ridge\n"
              "from sklearn.pipeline import make_pipeline\n"
              "from sklearn.preprocessing import StandardScaler\n"
              "from sklearn.tree import DecisionTreeRegressor\n"
              "X = pd.read_csv('x.csv')\n" + programs_block([GOOD], check=True) + "\n"
              "X = with_features(X)\n"
              "y = X['area_per_room'] * 3\n"
              "for fold in range(3):  # every fold fits; the first reports\n"
              f"    report_importances({model}.fit(X, y), X.columns)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    shares = reported_importances(done.stdout)
    assert next(iter(shares)) == "area_per_room" and shares["area_per_room"] > 0.5
    assert 0.99 <= sum(shares.values()) <= 1.01 and len(shares) <= IMPORTANCES_SHOWN
    assert done.stdout.count(IMPORTANCES) == 1
    assert reported_importances("no such line") == {}


def test_the_prompt_lists_what_was_tried_and_reads_a_reply() -> None:
    ctx = TaskContext(preview="price of a flat from rooms, area, built, city", target="price",
                      task_type="regression", metric="rmse", maximize=False, columns=COLUMNS)
    kept = dataclasses.replace(
        make_node("k1", operator=Operator.FEATURES, step=1),
        gate=Gate("b", (0.1, 0.2, 0.1, 0.1), True, "kept", ("area_per_room",)).to_json())
    refused = dataclasses.replace(make_node("r1", operator=Operator.FEATURES, step=2,
                                            status=Status.BUGGY),
                                  error=f"{REJECTED} it reads the target column 'price'")
    # the same columns tried twice more, on other references: the second time marked again
    again = [dataclasses.replace(
        make_node(f"n{i}", operator=Operator.FEATURES, step=3 + i),
        gate=Gate("b", (gain,) * 4, False, "not kept", ("rooms_x_area",)).to_json())
        for i, gain in enumerate((-0.2, -0.1))]
    again[-1] = dataclasses.replace(
        again[-1], stdout_tail=(f'{IMPORTANCES} {{"area_per_room": 0.4, "rooms_x_area": 0.35, '
                                '"rooms": 0.3}\n'))
    journal = Journal([make_node("b", operator=Operator.BASELINE), kept, refused, *again])
    kind = kind_of(Operator.FEATURES)
    proposal = Proposal(Operator.FEATURES, "k1", 0.7, idea="b", family="lgbm",
                        params=(("n_estimators", 10),))
    prompt = kind.prompt(ctx, proposal, journal)
    text = prompt.messages[-1]["content"]
    assert "- kept: added area_per_room (gain +0.125)\n" in text
    assert "- refused: it reads the target column 'price'\n" in text
    assert ("- not kept: added rooms_x_area (gain -0.2)\n"
            "- again, not kept: added rooms_x_area (gain -0.1)\n") in text
    # the not-kept program's own column is not among what a program here gets
    assert "# The model of the latest program relied most on: area_per_room 0.40, rooms 0.30" \
        in text
    assert prompt.max_tokens <= 400 and prompt.tag == "features"
    # the target is a name its decoding is kept off; the columns its rows hold are not
    assert prompt.never_names == ("price",)
    assert prompt.column_names == (*COLUMNS, "area_per_room")
    # the stable part is the same for every program of the run (prefix cache)
    other = kind.prompt(ctx, dataclasses.replace(proposal, parent_id=None), Journal([]))
    stable = text.split("# Programs already tried")[0]
    assert other.messages[-1]["content"].startswith(stable)
    root = dataclasses.replace(proposal, parent_id=None)
    parsed = kind.read(f"```python\n{GOOD}```", ctx, root, journal)
    assert parsed.problem == "" and "area_per_room" in parsed.plan
    assert kind.read(f"```python\n{PLANTED['test rows']}```", ctx, root,
                     journal).problem.startswith(REJECTED)
    # the reply begins with the function's first line and a statement's first word (k1 has
    # no code, so no kept statement); a reply continued from it reads whole
    assert prompt.reply_start.endswith("def add_features(df):\n    df")
    body = GOOD.split("def add_features(df):\n    df", 1)[1]
    assert kind.read(prompt.reply_start + body + "```", ctx, root, journal).problem == ""


def test_a_reply_on_a_kept_chain_starts_after_its_statements_and_is_only_its_own() -> None:
    """The kept programs' statements are written for the model (it began half its replies on
    a chain by computing them again); what it writes on from there is the program, and it
    may read the kept columns, which its rows hold."""
    ctx = TaskContext(preview="price of a flat", target="price", task_type="regression",
                      metric="rmse", maximize=False, columns=COLUMNS)
    first = ('def add_features(df):\n    df["area_per_room"] = (df["area"]\n'
             '        / (df["rooms"] + 1e-9))\n    return df\n')
    second = 'def add_features(df): df["old"] = 2025 - df["built"]; return df\n'
    journal = Journal([
        make_node("b", operator=Operator.BASELINE),
        dataclasses.replace(_kept("k1", None, 1, "area_per_room"),
                            code=model_code(ctx, "lgbm", {}, [first])),
        dataclasses.replace(_kept("k2", "k1", 2, "old"),
                            code=model_code(ctx, "lgbm", {}, [first, second]))])
    kind = kind_of(Operator.FEATURES)
    on_chain = Proposal(Operator.FEATURES, "k2", 0.7, idea="b", family="lgbm")
    prompt = kind.prompt(ctx, on_chain, journal)
    assert prompt.reply_start == (
        "```python\ndef add_features(df):\n"
        "    df['area_per_room'] = df['area'] / (df['rooms'] + 1e-09)\n"
        "    df['old'] = 2025 - df['built']\n    df")
    assert "never the target `price`" in " ".join(prompt.messages[-1]["content"].split())
    reply = prompt.reply_start + '["old_per_room"] = df["old"] / df["area_per_room"]'
    parsed = kind.read(reply, ctx, on_chain, journal)
    assert parsed.problem == "" and parsed.plan == "feature program adding old_per_room"
    assert parsed.code == ('def add_features(df):\n'
                           '    df["old_per_room"] = df["old"] / df["area_per_room"]\n'
                           '    return df\n')
    # a whole reply (a server that writes it all) that repeats the kept statements: the same
    whole = ('```python\ndef add_features(df):\n    df["old"] = 2025 - df["built"]\n'
             '    df["old_per_room"] = df["old"] / df["area_per_room"]\n    return df\n```')
    assert kind.read(whole, ctx, on_chain, journal).code == parsed.code
    # a column neither the rows nor the chain have is still refused
    assert kind.read(prompt.reply_start + '["x"] = df["floor"]', ctx, on_chain,
                     journal).problem == f"{REJECTED} it names a column 'floor' that the rows " \
                                         "do not have"


@pytest.mark.parametrize("after_first", [
    '\n    df["b"] = df["rooms"] * 2\n    return df\n```\n',
    "\n    \n    # rooms times two\n    df['b'] = df['rooms'] * 2\n",
    "\n    return df\n```\n",
    "\n```\nThis adds the area per room.",
])
def test_a_continued_reply_ends_after_its_first_statement(after_first: str) -> None:
    """What the stop strings leave of a reply that goes on after its first statement, as a
    backend cuts it: that statement alone (a two-line statement stays whole)."""
    first = '["a"] = np.where(df["rooms"] > 2,\n        df["area"], 0)'
    written = first + after_first
    cut = min((written.find(s) for s in STOP if s in written), default=len(written))
    assert written[:cut].rstrip() == first
def test_the_tried_list_grows_at_its_end_and_drops_its_oldest_lines_eight_at_a_time() -> None:
    ctx = TaskContext(preview="flats", target="price", task_type="regression", metric="rmse",
                      maximize=False, columns=COLUMNS)
    kind = kind_of(Operator.FEATURES)
    proposal = Proposal(Operator.FEATURES, None, 0.7, idea="b", family="lgbm")
    nodes = [dataclasses.replace(
        make_node(f"n{i}", operator=Operator.FEATURES, step=i),
        gate=Gate("b", (-0.1,) * 4, False, "not kept", (f"col{i}",)).to_json())
        for i in range(1, 26)]

    def listed(count: int) -> list[str]:
        text = kind.prompt(ctx, proposal, Journal(nodes[:count])).messages[-1]["content"]
        return [line for line in text.splitlines() if line.startswith("- not kept")]

    # up to 16 lines, then the oldest 8 go at once: each list is the previous one plus a line
    assert [len(listed(n)) for n in (1, 8, 9, 16, 17, 24, 25)] == [1, 8, 9, 16, 9, 16, 9]
    for count in (2, 9, 16, 18, 24):
        assert listed(count)[:-1] == listed(count - 1)
    assert listed(17)[0] == "- not kept: added col9 (gain -0.1)"


def _kept(node_id: str, parent: str | None, step: int, *added: str) -> Node:
    return dataclasses.replace(
        make_node(node_id, parent, operator=Operator.FEATURES, step=step),
        gate=Gate("b", (0.1,) * 4, True, "kept", added).to_json())


def test_statements_writing_given_columns_are_dropped_and_the_rest_kept_as_written() -> None:
    source = ('import numpy as np\n\ndef add_features(df):\n'
              '    df["a"] = (df["x"]\n               / df["y"])\n'
              '    df[["b"]] = df[["x"]]\n    df["c"] = np.log1p(df["a"])  # reads a\n'
              '    return df\n')
    assert without_columns(source, ["a", "b"]) == (
        'import numpy as np\n\ndef add_features(df):\n'
        '    df["c"] = np.log1p(df["a"])  # reads a\n    return df\n')
    assert without_columns(source, []) == source
    assert without_columns(source, ["z"]) == source
    assert without_columns("def add_features(df:\n", ["a"]) == "def add_features(df:\n"


def test_statements_doing_arithmetic_on_text_are_dropped_and_named() -> None:
    """The statements of a credit-g run's programs that raised on the rows, beside ones that
    run: the first kind go, the second stay as written."""
    source = ('def add_features(df):\n'
              '    df["ratio"] = df["credit_amount"] / df["savings_status"]\n'
              '    df["age_minus_duration"] = df["age"] - df["duration"]\n'
              '    df["checking"] = df["duration"] / df["checking_status"].astype(float)\n'
              '    df["is_business"] = df["purpose"] == "business" * 1.0\n'
              '    df["flag"] = (df["purpose"] == "business") * 1.0\n'
              '    df["pair"] = df["purpose"] + "_" + df["housing"]\n'
              '    df["text"] = df["purpose"].astype(str)\n'
              '    return df\n')
    trimmed, named = without_text_arithmetic(
        source, ["savings_status", "checking_status", "purpose", "housing"])
    assert trimmed == ('def add_features(df):\n'
                       '    df["age_minus_duration"] = df["age"] - df["duration"]\n'
                       '    df["flag"] = (df["purpose"] == "business") * 1.0\n'
                       '    df["pair"] = df["purpose"] + "_" + df["housing"]\n'
                       '    df["text"] = df["purpose"].astype(str)\n'
                       '    return df\n')
    assert named == ["savings_status", "checking_status"]
    # With no text column, a string added to a column is arithmetic too.
    assert without_text_arithmetic(source, []) == (
        source.replace('    df["is_business"] = df["purpose"] == "business" * 1.0\n', "")
        .replace('    df["pair"] = df["purpose"] + "_" + df["housing"]\n', ""), [])


def test_a_program_of_text_arithmetic_alone_is_refused_and_its_rest_must_stand() -> None:
    ctx = TaskContext(preview="credit", target="class", task_type="binary", metric="roc_auc",
                      maximize=True, columns=("age", "duration", "purpose"),
                      text_columns=("purpose",))
    kind = kind_of(Operator.FEATURES)
    root = Proposal(Operator.FEATURES, None, 0.7, idea="b", family="lgbm")
    journal = Journal([make_node("b", operator=Operator.BASELINE)])
    only = 'def add_features(df):\n    df["p"] = df["purpose"] * 2\n    return df\n'
    refused = kind.read(f"```python\n{only}```", ctx, root, journal)
    assert refused.problem == (f"{REJECTED} it does arithmetic on text (purpose), which fails "
                               "on the rows: compare a text column with one of its values "
                               "instead, as (df[column] == value)")
    uses_it = ('def add_features(df):\n    df["p"] = df["purpose"] * 2\n'
               '    df["q"] = df["p"] + df["age"]\n    return df\n')
    assert kind.read(f"```python\n{uses_it}```", ctx, root, journal).problem == (
        f"{REJECTED} it names a column 'p' that the rows do not have")
    mixed = ('def add_features(df):\n    df["p"] = df["purpose"] * 2\n'
             '    df["per_year"] = df["duration"] / (df["age"] + 1e-9)\n    return df\n')
    parsed = kind.read(f"```python\n{mixed}```", ctx, root, journal)
    assert parsed.problem == "" and parsed.plan == "feature program adding per_year"


SCORED_PROGRAM = ('def add_features(df):\n'
                  '    df["area_per_room"] = df["area"] / (df["rooms"] + 1e-9)\n    return df\n')


def _scored_program(node_id: str, program: str, *, kept: bool = False) -> Node:
    """A program on the columns as they are, scored and not kept, or kept with `kept` (its
    code as the step assembles it: the chain, here only itself)."""
    gain = 0.1 if kept else -0.1
    return dataclasses.replace(
        make_node(node_id, None, operator=Operator.FEATURES, step=2),
        code=f"FEATURE_PROGRAMS = [{program!r}]\n",
        gate=Gate("b", (gain,) * 4, kept, "kept" if kept else "not kept",
                  ("area_per_room",)).to_json())


def test_a_program_computing_what_was_scored_there_kept_or_not_is_refused() -> None:
    """Paired again and again, a computation passes the keep rule by chance sooner or later:
    one that was scored and not kept on a feature set is not run again on that set, under any
    name. A new computation under an old name runs; so does the old one on another set (its
    rows differ) and beside a new column."""
    ctx = TaskContext(preview="price of a flat", target="price", task_type="regression",
                      metric="rmse", maximize=False, columns=COLUMNS)
    not_kept = _scored_program("n1", SCORED_PROGRAM)
    journal = Journal([make_node("b", operator=Operator.BASELINE),
                       _kept("k1", None, 1, "rooms_x_area"), not_kept])
    kind = kind_of(Operator.FEATURES)
    root = Proposal(Operator.FEATURES, None, 0.7, idea="b", family="lgbm")
    renamed = ("def add_features(df):\n"
               "    df['room_area'] = df['area']/(df['rooms'] + 1e-9)\n    return df\n")
    assert kind.read(f"```python\n{renamed}```", ctx, root, journal).problem == (
        f"{REJECTED} it computes what was already scored on this feature set or is one of its "
        "columns (area / (rooms + 1e-09)): compute something new")
    new_under_old_name = SCORED_PROGRAM.replace('(df["rooms"] + 1e-9)', 'df["built"]')
    assert kind.read(f"```python\n{new_under_old_name}```", ctx, root, journal).problem == ""
    on_chain = dataclasses.replace(root, parent_id="k1")
    assert kind.read(f"```python\n{renamed}```", ctx, on_chain, journal).problem == ""
    with_new = renamed.replace("    return df", '    df["age"] = 2025 - df["built"]\n    return df')
    assert kind.read(f"```python\n{with_new}```", ctx, root, journal).problem == ""
    # the prompt lists what it computed, not the name it gave it
    prompt = kind.prompt(ctx, root, journal)
    assert "- not kept: area / (rooms + 1e-09) (gain -0.1)\n" in prompt.messages[-1]["content"]
    # and the embedded backend's decoding is steered off writing it again there
    # (actors.name_guard.ReadGuard), not on the chain where it was not scored
    assert prompt.never_computations == ("df['area'] / (df['rooms'] + 1e-09)",)
    assert kind.prompt(ctx, on_chain, journal).never_computations == ()
    # kept there is scored there too: a second program (written while the first was being
    # scored) that computes it again is refused, not kept a second time
    kept_there = Journal([make_node("b", operator=Operator.BASELINE),
                          _scored_program("k2", SCORED_PROGRAM, kept=True)])
    assert kind.read(f"```python\n{renamed}```", ctx, root, kept_there).problem.startswith(
        f"{REJECTED} it computes what was already scored on this feature set")


def test_a_program_on_a_chain_begins_after_every_kept_statement_and_may_not_only_repeat_them(
        ) -> None:
    """On a chain of two kept programs, the reply begins with the statements of both (the
    prompt once named the last one's columns alone, and the model recomputed the first one's
    in 6 of a run's 15 programs)."""
    ctx = TaskContext(preview="price of a flat", target="price", task_type="regression",
                      metric="rmse", maximize=False, columns=COLUMNS)
    first = ('def add_features(df):\n    df["area_per_room"] = df["area"] / df["rooms"]\n'
             '    df = df.drop(columns=["city"])\n    return df\n')
    second = ('def add_features(df):\n    df["rooms_x_area"] = df["rooms"] * df["area"]\n'
              '    return df\n')
    journal = Journal([make_node("b", operator=Operator.BASELINE),
                       _kept("k1", None, 1, "area_per_room", "-city"),
                       dataclasses.replace(_kept("k2", "k1", 2, "rooms_x_area"),
                                           code=model_code(ctx, "lgbm", {}, [first, second]))])
    kind = kind_of(Operator.FEATURES)
    on_chain = Proposal(Operator.FEATURES, "k2", 0.7, idea="b", family="lgbm")
    assert kind.prompt(ctx, on_chain, journal).reply_start.endswith(
        "    df['area_per_room'] = df['area'] / df['rooms']\n"
        "    df = df.drop(columns=['city'])\n"
        "    df['rooms_x_area'] = df['rooms'] * df['area']\n    df")
    repeat = ('def add_features(df):\n    df["area_per_room"] = df["area"] / df["rooms"]\n'
              '    df["rooms_x_area"] = df["rooms"] * df["area"]\n    return df\n')
    refused = kind.read(f"```python\n{repeat}```", ctx, on_chain, journal)
    assert refused.problem == (f"{REJECTED} it only computes columns that kept programs "
                               "already add (area_per_room, rooms_x_area): add new ones")
    # A program that repeats them and adds one more keeps only what it adds: the kept
    # columns stay as the kept programs made them.
    one_new = repeat.replace("    return df", '    df["age"] = 2025 - df["built"]\n    return df')
    parsed = kind.read(f"```python\n{one_new}```", ctx, on_chain, journal)
    assert parsed.problem == "" and parsed.plan == "feature program adding age"
    assert parsed.code == ('def add_features(df):\n    df["age"] = 2025 - df["built"]\n'
                           '    return df\n')
    # The same program on the raw columns adds what it writes.
    raw = dataclasses.replace(on_chain, parent_id=None)
    assert kind.read(f"```python\n{repeat}```", ctx, raw, journal).problem == ""
    # A program that drops or retypes without writing a new column still does something.
    drops = repeat.replace("    return df", '    df = df.drop(columns=["city"])\n    return df')
    assert kind.read(f"```python\n{drops}```", ctx, on_chain, journal).problem == ""
    only_drop = 'def add_features(df):\n    return df.drop(columns=["built"])\n'
    assert kind.read(f"```python\n{only_drop}```", ctx, raw, journal).problem == ""
    # Under new names, what the chain computes adds nothing the set lacks.
    renamed = repeat.replace("area_per_room", "room_size").replace("rooms_x_area", "size")
    assert kind.read(f"```python\n{renamed}```", ctx, on_chain, journal).problem.startswith(
        f"{REJECTED} it computes what was already scored on this feature set or is one of its "
        "columns")
    # The embedded backend's decoding is steered off both (actors.name_guard): the kept
    # columns' names as what a statement assigns, their computations, text in arithmetic.
    prompt = kind.prompt(dataclasses.replace(ctx, text_columns=("city",)), on_chain, journal)
    assert prompt.kept_names == ("area_per_room", "rooms_x_area")
    assert prompt.never_computations == ("df['area'] / df['rooms']", "df['rooms'] * df['area']")
    assert prompt.text_names == ("city",)
    assert kind.prompt(ctx, raw, journal).kept_names == ()


def test_the_prompt_names_the_columns_no_program_has_read_yet() -> None:
    ctx = TaskContext(preview="price of a flat", target="price", task_type="regression",
                      metric="rmse", maximize=False, columns=COLUMNS)
    ran = _scored_program("n1", SCORED_PROGRAM)
    refused = dataclasses.replace(
        make_node("r1", None, operator=Operator.FEATURES, step=3, status=Status.BUGGY),
        error=f"{REJECTED} it reads the target column 'price'",
        reply='```python\ndef add_features(df):\n    df["p"] = df["price"] / df["built"]\n```')
    kind = kind_of(Operator.FEATURES)
    root = Proposal(Operator.FEATURES, None, 0.7, idea="b", family="lgbm")
    base = make_node("b", operator=Operator.BASELINE)
    text = kind.prompt(ctx, root, Journal([base, ran, refused])).messages[-1]["content"]
    unread = [c for c in COLUMNS if c not in ("area", "rooms", "built")]
    assert f"# Columns no program has read yet: {', '.join(unread)}\n" in text
    # before any program the line says nothing
    assert "no program has read" not in kind.prompt(ctx, root, Journal([base])).messages[-1][
        "content"]
