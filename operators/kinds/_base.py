"""What an operator is to the step, and the registry that finds an operator's module by name.

Each module of this package is one operator's home (or that of a few closely related ones):
its prompt, how its reply is read, the code the engine writes for it and how long one run of
it may take. It subclasses `OperatorKind` and registers itself; `engine.step` looks the kind
up (`kind_of`) instead of branching on the operator. What the pure search layer must know of
an operator (is it engine-written, a draft, scored...) sits beside the enum, in
`search.node.OperatorTraits`, since search may not import this package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from common.chat import ChatPrompt
from operators.context import TaskContext
from operators.prompts import CODE_ASK
from operators.replies import Parsed, parse_reply
from search.journal import Journal
from search.node import Operator
from search.policy import Proposal


@dataclass(frozen=True, slots=True)
class EngineCode:
    """Code the engine wrote for a node (no LLM call) and what it ran."""

    plan: str
    code: str  # the node's code: an assembled script that runs on its own
    # The same model fitting every fold in one process (the engine's own code may read every
    # dev label); "" for code an LLM wrote, here or in an earlier run, which runs fold by fold.
    all_folds_code: str = ""
    # A feature program's all-folds run fitting its gate's sides with the program alone, for
    # a search that kept the sides without it from an earlier program's run on the same
    # reference configuration and feature set; "" for every other node.
    with_program_code: str = ""
    # A feature program's all-folds runs fitting its gate's pairs after the first
    # (search.programs.screen): both sides, and the side with the program alone; () for every
    # other node.
    second_pair: tuple[str, str] | tuple[()] = ()
    # Each of a feature program's gate pairs' split (search.programs.gate_pairs), in the order
    # its runs fit them; () for every other node.
    gate_splits: tuple[int, ...] = ()


class OperatorKind:
    """One operator: by default, LLM-written model code, run fold by fold for at most the
    search's cap per run."""

    operator: ClassVar[Operator]
    reflects: ClassVar[bool] = False  # with --reflect, a reflection call comes before it
    executes: ClassVar[bool] = True  # its reply is code to run (else the reply is the result)
    re_asks: ClassVar[bool] = True  # an unusable reply is asked for again, once
    repair_ask: ClassVar[str] = CODE_ASK  # what that re-ask asks for

    def prompt(self, ctx: TaskContext, proposal: Proposal, journal: Journal,
               reflection: str = "") -> ChatPrompt:
        raise ValueError(f"no prompt for operator {self.operator}: the engine writes its code")

    def reflection_job(self, ctx: TaskContext, proposal: Proposal, journal: Journal) -> str:
        """The end of the reflection prompt before this step (kinds that reflect)."""
        raise ValueError(f"operator {self.operator} has no reflection call")

    def pinned(self, proposal: Proposal, journal: Journal) -> Proposal:
        """The proposal with what it asks for fixed before a reflection on it."""
        return proposal

    def read(self, text: str, ctx: TaskContext, proposal: Proposal,
             journal: Journal) -> Parsed:
        """A reply to `proposal` as plan and code, or the problem a re-ask shows."""
        return parse_reply(text, ctx)

    def assembled(self, code: str, ctx: TaskContext, proposal: Proposal,
                  journal: Journal) -> EngineCode:
        """The node's code from the code a reply gave (read and checked): as it is, run fold
        by fold, unless the engine writes the script around it (`plan` is the reply's)."""
        return EngineCode("", code)

    def repeats(self, code: str, siblings: Sequence[str]) -> str:
        """Why a node's code does nothing that its siblings' code (the same operator on the
        same parent, queued or running now) does not already do, in substance if not byte for
        byte, so it is not run; "" to run it. Identical code is found for every kind by its
        hash, before this."""
        return ""

    def steered(self, prompt: ChatPrompt, siblings: Sequence[str]) -> ChatPrompt:
        """The prompt with what its siblings' code (the same operator on the same parent,
        queued or running now) already does kept off its reply's decoding, where a backend
        can steer it (ChatPrompt.never_computations); as it is by default."""
        return prompt

    def engine_code(self, ctx: TaskContext, proposal: Proposal, journal: Journal) -> EngineCode:
        raise ValueError(f"operator {self.operator} is not engine-written")

    def seconds(self, exec_timeout: float, floor_seconds: float | None) -> float:
        """How long one run may take, given the search's cap and the floor's."""
        return exec_timeout

    def printed_failure(self, stdout: str) -> str:
        """Why a run of an unscored node that exited 0 failed all the same, from what it
        printed ("" when it did not)."""
        return ""


class FloorKind(OperatorKind):
    """The floor's own work (search/floor.py): a slow trial must not hold an executor for a
    large part of a short budget, so it runs under the floor's cap when one is set."""

    def seconds(self, exec_timeout: float, floor_seconds: float | None) -> float:
        return min(exec_timeout, floor_seconds) if floor_seconds else exec_timeout


_REGISTRY: dict[Operator, OperatorKind] = {}


def register(kind: type[OperatorKind]) -> type[OperatorKind]:
    """Class decorator: `kind` is the module of its operator."""
    if kind.operator in _REGISTRY:
        raise ValueError(f"operator {kind.operator} is registered twice")
    _REGISTRY[kind.operator] = kind()
    return kind


def kind_of(operator: Operator | str) -> OperatorKind:
    """The registered kind of an operator, by the operator or its name."""
    try:
        return _REGISTRY[Operator(operator)]
    except (ValueError, KeyError):
        known = ", ".join(sorted(op.value for op in _REGISTRY))
        raise ValueError(f"no operator module registered for {str(operator)!r}; "
                         f"registered: {known}") from None


def registered() -> list[Operator]:
    return sorted(_REGISTRY, key=list(Operator).index)



def build_prompt(ctx: TaskContext, proposal: Proposal, journal: Journal,
                 reflection: str = "") -> ChatPrompt:
    """The first prompt of a step: its operator's."""
    return kind_of(proposal.operator).prompt(ctx, proposal, journal, reflection)


def repair_prompt(prompt: ChatPrompt, reply: str, problem: str) -> ChatPrompt:
    """Re-ask once when a reply has no usable code (or ideas), before it costs an execution;
    the operator that asked (the prompt's tag) says what to ask for again."""
    messages = [
        *prompt.messages,
        {"role": "assistant", "content": reply},
        {"role": "user", "content": f"{problem} {kind_of(prompt.tag).repair_ask}"},
    ]
    return ChatPrompt(messages, prompt.max_tokens, prompt.temperature, prompt.seed + 1,
                      prompt.tag, prompt.stop, reply_start=prompt.reply_start)
