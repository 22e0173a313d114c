"""The embedded llama.cpp backend, run for real on the Qwen2.5-Coder GGUF from its PyPI parts.

Tests marked `slow` load the model (~1 GB, no network) and need the 'local' extra; they fail,
rather than skip, when it is missing, because the slow CI step installs it. The unmarked tests
cover the backend's pure logic and its missing-extra error without loading anything.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from collections.abc import Iterator

import pytest

from actors.llama_backend import (
    MIN_MAX_TOKENS,
    LlamaLLM,
    amx_build_on_amx_cpu,
    fit_max_tokens,
)
from actors.llm import make_llm
from actors.model_assets import MODEL_NAME
from common.chat import ChatPrompt
from common.errors import BackendError
from operators.context import TaskContext
from operators.features import (
    assigned_columns,
    columns_read,
    completed,
    computations,
    program_source,
    without_text_arithmetic,
)
from operators.kinds import kind_of
from operators.kinds.features import MAX_TOKENS
from operators.models import model_code
from search.journal import Journal
from search.node import Node, Operator, Status
from search.policy import Proposal
from search.programs import Gate

CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
# The slow step runs two test files at once on 2 cores: llama.cpp's threads wait for each other
# at every step, so 2 threads beside a busy core were 4 to 9 times slower than alone, and 1
# thread as fast as alone (benchmarks/results/program-speed-2026-11-28).
THREADS = 1


def test_fit_max_tokens_keeps_a_budget_that_fits() -> None:
    assert fit_max_tokens(prompt_tokens=1000, max_tokens=2000, n_ctx=8192) == 2000
    assert fit_max_tokens(prompt_tokens=6192, max_tokens=2000, n_ctx=8192) == 2000


def test_fit_max_tokens_shrinks_to_the_room_left() -> None:
    assert fit_max_tokens(prompt_tokens=7000, max_tokens=2000, n_ctx=8192) == 1192
    assert fit_max_tokens(prompt_tokens=8192 - MIN_MAX_TOKENS, max_tokens=2000, n_ctx=8192) == (
        MIN_MAX_TOKENS
    )


def test_fit_max_tokens_refuses_less_than_the_minimum() -> None:
    with pytest.raises(BackendError, match="leaves 255 of the 8192-token context"):
        fit_max_tokens(prompt_tokens=8192 - 255, max_tokens=2000, n_ctx=8192)
    with pytest.raises(BackendError, match="leaves 0 of"):
        fit_max_tokens(prompt_tokens=9000, max_tokens=2000, n_ctx=8192)
    # A small request is honoured whole or refused, never cut below itself.
    assert fit_max_tokens(prompt_tokens=8000, max_tokens=100, n_ctx=8192) == 100


def test_missing_llama_cpp_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` fail
    with pytest.raises(BackendError) as info:
        LlamaLLM()
    assert str(info.value) == "the embedded LLM needs the 'local' extra: pip install -e '.[local]'"


AMX_BUILD = "CPU : AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 | "
AMX_CPU = "flags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n"


def test_a_build_with_amx_kernels_is_refused_on_a_cpu_with_amx_only() -> None:
    reason = amx_build_on_amx_cpu(AMX_BUILD, AMX_CPU)
    assert reason is not None and "rebuild it as setup.sh does" in reason
    assert amx_build_on_amx_cpu(AMX_BUILD.replace("AMX_INT8 = 1 | ", ""), AMX_CPU) is None
    assert amx_build_on_amx_cpu(AMX_BUILD, AMX_CPU.replace(" amx_int8", "")) is None
    assert amx_build_on_amx_cpu(AMX_BUILD, "") is None  # not Linux: nothing to read


@pytest.fixture(scope="module")
def llm() -> Iterator[LlamaLLM]:
    with LlamaLLM(seed=0, n_threads=THREADS) as model:
        yield model


def code_prompt() -> ChatPrompt:
    return ChatPrompt(
        messages=[
            {"role": "system", "content": "You are a careful Python programmer."},
            {
                "role": "user",
                "content": "Write a python function that returns the sum of a list, "
                "in one ```python code block.",
            },
        ],
        max_tokens=200,
        temperature=0.0,
        seed=7,
    )


@pytest.mark.slow
def test_writes_a_python_block_that_parses(llm: LlamaLLM) -> None:
    [reply] = llm.generate([code_prompt()])
    blocks = CODE_BLOCK.findall(reply.text)
    assert blocks, f"no ```python block in: {reply.text!r}"
    tree = ast.parse(blocks[0])
    assert any(isinstance(node, ast.FunctionDef) for node in ast.walk(tree))
    assert reply.prompt_tokens > 0
    assert reply.completion_tokens > 0
    assert reply.seconds > 0
    assert reply.model == llm.model == MODEL_NAME
    assert reply.finish_reason in {"stop", "length"}


@pytest.mark.slow
def test_greedy_replies_repeat_exactly(llm: LlamaLLM) -> None:
    # The second call reuses the first one's KV cache, so this also checks that reuse does
    # not change what greedy decoding picks.
    first, second = llm.generate([code_prompt(), code_prompt()])
    assert first.text == second.text
    assert first.completion_tokens == second.completion_tokens


@pytest.mark.slow
def test_a_reply_continues_the_start_it_is_given(llm: LlamaLLM) -> None:
    # The feature programs' form: the fence and the function's first line are written for the
    # model, which writes only the body.
    start = "```python\ndef total(values):\n"
    prompt = dataclasses.replace(code_prompt(), reply_start=start, stop=["\n```\n"])
    [reply] = llm.generate([prompt])
    [plain] = llm.generate([code_prompt()])
    assert reply.text.startswith(start)
    source = CODE_BLOCK.findall(reply.text + "\n```\n")[0]
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef) and function.name == "total"
    assert 0 < reply.completion_tokens < plain.completion_tokens  # the start is not counted


@pytest.mark.slow
def test_a_feature_program_reply_is_one_new_statement_after_the_kept_ones(
        llm: LlamaLLM) -> None:
    # The engine's own prompt on a chain with one kept program: the reply is started with the
    # kept statement and `    df`, and the stop strings end it where a second statement, a
    # comment or the return would begin.
    ctx = TaskContext(preview=("Target: `price` (regression)\nFeatures: rooms (int), "
                               "area_m2 (float), built_year (int), floor (int)"),
                      target="price", task_type="regression", metric="rmse", maximize=False,
                      columns=("rooms", "area_m2", "built_year", "floor"))
    kept = ('def add_features(df):\n    df["area_per_room"] = df["area_m2"] / '
            '(df["rooms"] + 1e-9)\n    return df\n')
    gate = Gate("b", (0.1,) * 4, True, "kept", ("area_per_room",)).to_json()
    journal = Journal([
        Node(node_id="b", parent_id=None, operator=Operator.BASELINE, status=Status.OK),
        Node(node_id="k", parent_id=None, operator=Operator.FEATURES, status=Status.OK,
             step=1, gate=gate, code=model_code(ctx, "lgbm", {}, [kept]))])
    proposal = Proposal(Operator.FEATURES, "k", 0.0, idea="b", family="lgbm")
    kind = kind_of(Operator.FEATURES)
    [reply] = llm.generate([kind.prompt(ctx, proposal, journal)])
    assert reply.text.startswith(kind.prompt(ctx, proposal, journal).reply_start)
    assert reply.completion_tokens < MAX_TOKENS and reply.finish_reason == "stop"
    parsed = kind.read(reply.text, ctx, proposal, journal)
    function = ast.parse(parsed.code).body[0]
    assert isinstance(function, ast.FunctionDef)
    assert len([s for s in function.body if not isinstance(s, ast.Return)]) == 1, parsed.code
    assert "area_per_room\"] = df" not in parsed.code  # the kept statement is not its own


@pytest.mark.slow
def test_a_never_name_is_not_written_as_a_column_even_when_asked_for(llm: LlamaLLM) -> None:
    # Asked outright for a column read from the target, the model writes one unguarded; with
    # the target among the prompt's never-names it writes another column.
    asked = ChatPrompt(
        messages=[{"role": "user", "content": (
            "Columns: cement, water, age. Write add_features(df) that adds "
            'df["strength_ratio"] = df["strength"] / df["age"], in one ```python block.')}],
        max_tokens=32, temperature=0.0, seed=3, stop=["\n    return"],
        reply_start="```python\ndef add_features(df):\n    df")
    [free] = llm.generate([asked])
    guarded = dataclasses.replace(asked, never_names=("strength",),
                                  column_names=("cement", "water", "age"))
    [kept_off] = llm.generate([guarded])
    column_names = re.compile(r"""\[\s*['"]([^'"]*)""")
    assert any(n.startswith("strength") for n in column_names.findall(free.text)), free.text
    names = column_names.findall(kept_off.text.removeprefix(guarded.reply_start))
    assert names and not any(n.startswith("str") for n in names), kept_off.text


@pytest.mark.slow
def test_a_computation_tried_is_not_written_again_even_when_asked_for(llm: LlamaLLM) -> None:
    # Asked outright for a ratio already tried, the model writes it unguarded; with it among
    # the prompt's computations tried, it writes the ratio of water to another column
    # (actors.name_guard.ReadGuard).
    asked = ChatPrompt(
        messages=[{"role": "user", "content": (
            "Columns: cement, water, age. Write add_features(df) that adds "
            'df["wc"] = df["water"] / df["cement"], in one ```python block.')}],
        max_tokens=32, temperature=0.0, seed=3, stop=["\n    return"],
        reply_start="```python\ndef add_features(df):\n    df",
        column_names=("cement", "water", "age"))
    tried = "df['water'] / df['cement']"
    [free] = llm.generate([asked])
    [kept_off] = llm.generate([dataclasses.replace(asked, never_computations=(tried,))])
    assert tried in computations(completed(program_source(free.text))).values(), free.text
    again = computations(completed(program_source(kept_off.text)))
    assert again and tried not in again.values(), kept_off.text
    # and what it reads instead is a column the rows have
    assert columns_read(completed(program_source(kept_off.text))) <= {"cement", "water", "age"}


@pytest.mark.slow
def test_text_stays_out_of_arithmetic_and_a_kept_column_is_not_assigned_again(
        llm: LlamaLLM) -> None:
    # Asked outright to divide by a text column and to name the result as a kept column, the
    # model does both unguarded; with the prompt's text and kept names it does neither
    # (actors.name_guard.ReadGuard, WriteGuard).
    asked = ChatPrompt(
        messages=[{"role": "user", "content": (
            "Columns: credit_amount, job (text), age, amount_per_age. Write add_features(df) "
            'that adds df["amount_per_age"] = df["credit_amount"] / df["job"], in one '
            "```python block.")}],
        max_tokens=32, temperature=0.0, seed=3, stop=["\n    return"],
        reply_start="```python\ndef add_features(df):\n    df",
        column_names=("credit_amount", "job", "age", "amount_per_age"))
    [free] = llm.generate([asked])
    [kept_off] = llm.generate([dataclasses.replace(asked, text_names=("job",),
                                                   kept_names=("amount_per_age",))])
    free_source = completed(program_source(free.text))
    assert without_text_arithmetic(free_source, ["job"])[1] == ["job"], free.text
    assert "amount_per_age" in assigned_columns(ast.parse(free_source)), free.text
    guarded_source = completed(program_source(kept_off.text))
    assert without_text_arithmetic(guarded_source, ["job"])[1] == [], kept_off.text
    written = assigned_columns(ast.parse(guarded_source))
    assert written and "amount_per_age" not in written, kept_off.text


@pytest.mark.slow
def test_max_tokens_shrinks_to_fit_a_small_context() -> None:
    with LlamaLLM(n_ctx=512, cache_bytes=0, n_threads=THREADS) as small:
        words = " ".join(f"w{i}" for i in range(60))
        fits = ChatPrompt(
            messages=[{"role": "user", "content": f"{words}\nReply with the single word OK."}],
            max_tokens=4096,  # far more than the 512-token context holds
            temperature=0.0,
        )
        [reply] = small.generate([fits])
        assert reply.completion_tokens > 0
        assert reply.prompt_tokens + reply.completion_tokens <= 512

        # ~370 tokens: llama.cpp itself would accept it and silently leave ~120 for the reply.
        long_words = " ".join(f"w{i}" for i in range(120))
        too_long = ChatPrompt(messages=[{"role": "user", "content": long_words}], max_tokens=512)
        with pytest.raises(BackendError, match=r"of the 512-token context for the reply"):
            small.generate([too_long])


@pytest.mark.slow
def test_spec_with_a_missing_file_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match=r"no-such\.gguf not found"):
        make_llm("llama:/nonexistent/no-such.gguf")
