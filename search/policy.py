"""What a search policy is: it proposes expansions and observes results; it never executes.

The loop asks `propose(journal, n, in_flight)` whenever workers are free, where `in_flight`
counts proposals already handed out and not yet finished, keyed by `(operator, parent_id)`.
Policies use it to spread concurrent work (virtual loss), so N workers explore N things.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from common.errors import UserError
from search.journal import Journal
from search.node import HintForm, Node, Operator

InFlightKey = tuple[Operator, str | None]


def in_flight_of(in_flight: Mapping[InFlightKey, int], operator: Operator) -> int:
    """How many proposals of `operator` are in flight, over every parent."""
    return sum(count for (op, _), count in in_flight.items() if op is operator)


@dataclass(frozen=True, slots=True)
class Proposal:
    """One expansion a policy asks for. What it asks is typed, one field per kind of request;
    `hint` is the one text form stored with the node (and in the in-flight notes), read back
    by `Proposal.from_hint`, so a policy whose state lives in its requests (sela) is rebuilt
    from the Journal."""

    operator: Operator
    parent_id: str | None = None
    temperature: float = 0.7
    idea: str = ""  # draft, improve: the model family or change asked for ("" = the next one)
    members: tuple[str, ...] = ()  # ensemble: the member node ids, best first
    stage: str = ""  # insights: the SELA stage whose ideas are asked for
    path: tuple[int, ...] = ()  # sela rollout: the insight index chosen at each stage
    insights: tuple[str, ...] = ()  # sela rollout: those insights' texts
    family: str = ""  # portfolio, tune: the model family (search.families)
    # portfolio, tune: its hyperparameters; case: those the floor sized down (search/floor.py)
    params: tuple[tuple[str, Any], ...] = ()
    # portfolio, tune: the kept feature program whose chain the model trains on ("" none);
    # features: the name (`idea`) is the reference node the program is paired with
    feature_set: str = ""
    # features: the text column whose kind the LLM is asked (operators/column_kinds.py), whose
    # answer becomes the program; "" for a program the LLM writes
    column: str = ""

    @property
    def param_dict(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def key(self) -> InFlightKey:
        return (self.operator, self.parent_id)

    @property
    def hint(self) -> str:
        match self.operator.traits.hint_form:
            case HintForm.MEMBERS:
                return ",".join(self.members)
            case HintForm.STAGE:
                return self.stage
            case HintForm.PATH:
                return json.dumps({"path": list(self.path), "insights": list(self.insights)},
                                  ensure_ascii=False)
            case HintForm.CONFIGURATION:
                data = {"name": self.idea, "family": self.family, "params": self.param_dict}
                if self.feature_set:
                    data["features"] = self.feature_set
                if self.column:
                    data["column"] = self.column
                return json.dumps(data)
        return self.idea

    @classmethod
    def from_hint(cls, operator: Operator, parent_id: str | None, temperature: float,
                  hint: str) -> Proposal:
        """The proposal whose `hint` this is (a rollout hint that cannot be read is the empty
        path)."""
        match operator.traits.hint_form:
            case HintForm.MEMBERS:
                return cls(operator, parent_id, temperature,
                           members=tuple(hint.split(",")) if hint else ())
            case HintForm.STAGE:
                return cls(operator, parent_id, temperature, stage=hint)
            case HintForm.PATH:
                path, insights = _decode_path(hint)
                return cls(operator, parent_id, temperature, path=path, insights=insights)
            case HintForm.CONFIGURATION:
                try:
                    data = json.loads(hint)
                    return cls(operator, parent_id, temperature, idea=str(data.get("name", "")),
                               family=str(data["family"]),
                               params=tuple(sorted(dict(data["params"]).items())),
                               feature_set=str(data.get("features", "")),
                               column=str(data.get("column", "")))
                except (ValueError, TypeError, KeyError, AttributeError):
                    return cls(operator, parent_id, temperature)
        return cls(operator, parent_id, temperature, idea=hint)

    @classmethod
    def of(cls, node: Node) -> Proposal:
        """The proposal that produced `node`."""
        return cls.from_hint(node.operator, node.parent_id, node.temperature, node.hint)


def _decode_path(hint: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    try:
        data = json.loads(hint, strict=False)
        path = tuple(int(i) for i in data["path"])
        insights = tuple(str(t) for t in data["insights"])
    except (ValueError, TypeError, KeyError):
        return (), ()
    return (path, insights) if len(path) == len(insights) else ((), ())


@dataclass
class PolicyOptions:
    """The options every policy accepts, so that one CLI passes the same ones to each; a policy
    that has no use for one says so in its docstring."""

    seed: int = 0
    num_drafts: int = 3
    debug_prob: float = 0.5
    max_debug_depth: int = 3
    base_temperature: float = 0.7
    ideas: str = "all"  # draft and improvement idea pools (search.ideas.IDEA_POOLS)
    # Retrieved cases (--memory): ids of other tasks' working code, nearest first; up to
    # `recalls` of them (None: all) are adapted by recall drafts, in the first root slots
    cases: tuple[str, ...] = ()
    recalls: int | None = None
    case_nodes: bool = False  # the floor runs each case as stored (search/floor.py)
    writes: str = "scripts"  # what the LLM writes: search.programs.WRITES
    # The text columns whose kind the LLM is asked, once each, before its own feature programs
    # (search.floor.program_proposal; operators.column_kinds.worth_asking chose them)
    questions: tuple[str, ...] = ()


class Policy(Protocol):
    name: str

    def propose(
        self, journal: Journal, n: int, in_flight: Mapping[InFlightKey, int]
    ) -> list[Proposal]:
        """Up to n next steps, given the steps already in flight; fewer (none) only while
        steps in flight may give it better work, never with nothing in flight."""
        ...

    def observe(self, node: Node) -> None: ...


PolicyFactory = Callable[..., Policy]
_REGISTRY: dict[str, PolicyFactory] = {}


def register(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    def wrap(factory: PolicyFactory) -> PolicyFactory:
        _REGISTRY[name] = factory
        return factory

    return wrap


def available() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def make_policy(name: str, seed: int, **options: object) -> Policy:
    _load_builtin()
    if name not in _REGISTRY:
        raise UserError(f"unknown policy {name!r}; choose one of: {', '.join(available())}")
    return _REGISTRY[name](seed=seed, **options)


def _load_builtin() -> None:
    # Importing registers them; deferred so search.policy has no import cycle.
    from search import greedy, mcts, sela  # noqa: F401
