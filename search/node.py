"""The node record: one frozen, id-linked row per finished expansion of the tree.

Derived facts (children, debug depth, leaves, best) live on the Journal, never in a node.
The test-split score is deliberately absent: it is stored beside the node by the engine and
never reaches a policy or a prompt. Each operator's traits (what the search needs to know of
it) sit beside the Operator enum; the rest of an operator lives in its module under
operators/kinds/.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

# Where the LLM-written part of a node's code begins and ends (operators.harness assembles the
# script around it); a whole-script reply has neither marker.
MODEL_START = "# ---- model code (written by the LLM) ----"
MODEL_END = "# ---- end of model code ----"
# A class's probability column in a submission is PROBA_PREFIX + the label (`proba_yes`): the
# harness writes it, the engine's scoring, selection, blend and API read it back.
PROBA_PREFIX = "proba_"


class Status(StrEnum):
    OK = "ok"
    BUGGY = "buggy"
    TIMEOUT = "timeout"
    OOM = "oom"
    KILLED = "killed"
    LOST = "lost"


class Operator(StrEnum):
    DRAFT = "draft"
    IMPROVE = "improve"
    DEBUG = "debug"
    REFLECT = "reflect"  # the tag of a reflection call; its text lands in the next node
    INSIGHTS = "insights"  # sela: ideas for one stage; the reply is a list, not code
    SELA = "sela"  # sela: a rollout turning a path of insights into one script
    BASELINE = "baseline"
    ENSEMBLE = "ensemble"
    ANALYZE = "analyze"  # a data-exploration script run before drafting; never a candidate
    PORTFOLIO = "portfolio"  # engine-written: one fixed configuration of a model family
    TUNE = "tune"  # engine-written: an Optuna trial over a model family's hyperparameters
    RECALL = "recall"  # a draft adapting a retrieved case: another task's working code
    CASE = "case"  # engine-written: a retrieved case's code run as stored, no LLM call
    # An LLM-written feature program (add_features(df) -> df) run with the floor's best
    # configuration and kept only when it beats that configuration without it (search/programs)
    FEATURES = "features"

    @property
    def traits(self) -> OperatorTraits:
        return TRAITS[self]


class HintForm(StrEnum):
    """How a proposal of an operator is stored as its node's `hint` (search.policy)."""

    IDEA = "idea"  # the idea, case id or nothing, as it is
    MEMBERS = "members"  # the ensemble's member ids, comma-separated
    STAGE = "stage"  # the SELA stage whose ideas are asked for
    PATH = "path"  # a SELA rollout's insight path, JSON
    CONFIGURATION = "configuration"  # a model family and its hyperparameters, JSON


@dataclass(frozen=True, slots=True)
class OperatorTraits:
    """What the pure search layer knows about an operator. Its prompt, reply parsing, code and
    limits live in its module under operators/kinds/, which search may not import."""

    # No LLM call: the engine writes its code (or, for a case, runs stored code as it is).
    engine_written: bool = False
    # Its node is a candidate scored on hidden labels (an analysis or a list of ideas is not).
    scored: bool = True
    draft: bool = False  # a root the LLM writes from the task alone: it counts as a draft
    repairs: bool = False  # it fixes its failed parent: a chain of them is the debug depth
    combines: bool = False  # its code combines other nodes' models (an ensemble)
    # A fixed configuration the engine chose: its proposal carries the model family and the
    # hyperparameters (the baseline root's are fixed, its hint empty).
    configured: bool = False
    # Its code is model code an LLM wrote (here or, for a case, in an earlier run): the floor
    # may tune it around its own PARAMS.
    tunable: bool = False
    run_once: bool = False  # the floor runs each of its proposals once per run
    # Its proposal's idea is a retrieved case's id: its code is that case's, run as stored or
    # adapted by the LLM (engine/memory.py).
    from_case: bool = False
    # The LLM wrote a feature program, not model code: the engine runs it with a configuration
    # of its own and gates it (search/programs.py); a failed one is never handed to a debug step.
    program: bool = False
    # The run's reference root: the engine's model on the columns as they are, queued first and
    # once; the floor's configurations and the final selection measure against it.
    reference: bool = False
    # Its findings join every later prompt: it runs before any other LLM step, alone.
    informs: bool = False
    hint_form: HintForm = HintForm.IDEA

    @property
    def repairable(self) -> bool:
        """A failed node of it may be handed to a debug step (the engine's ensembles and the
        analysis scripts never are)."""
        return self.scored and not self.combines and not self.program


TRAITS: dict[Operator, OperatorTraits] = {
    Operator.DRAFT: OperatorTraits(draft=True, tunable=True),
    Operator.IMPROVE: OperatorTraits(tunable=True),
    Operator.DEBUG: OperatorTraits(repairs=True, tunable=True),
    Operator.REFLECT: OperatorTraits(scored=False),
    Operator.INSIGHTS: OperatorTraits(scored=False, hint_form=HintForm.STAGE),
    Operator.SELA: OperatorTraits(tunable=True, hint_form=HintForm.PATH),
    Operator.BASELINE: OperatorTraits(engine_written=True, configured=True, reference=True),
    Operator.ENSEMBLE: OperatorTraits(engine_written=True, combines=True,
                                      hint_form=HintForm.MEMBERS),
    Operator.ANALYZE: OperatorTraits(scored=False, informs=True),
    Operator.PORTFOLIO: OperatorTraits(engine_written=True, configured=True, run_once=True,
                                       hint_form=HintForm.CONFIGURATION),
    Operator.TUNE: OperatorTraits(engine_written=True, configured=True,
                                  hint_form=HintForm.CONFIGURATION),
    Operator.RECALL: OperatorTraits(draft=True, tunable=True, from_case=True),
    Operator.CASE: OperatorTraits(engine_written=True, tunable=True, run_once=True,
                                  from_case=True),
    # Its configuration (hint) is the reference node's: name = that node's id.
    Operator.FEATURES: OperatorTraits(configured=True, program=True,
                                      hint_form=HintForm.CONFIGURATION),
}


def code_hash(code: str) -> str:
    """Hash of code with trailing whitespace per line ignored, so cosmetic repeats match."""
    normal = "\n".join(line.rstrip() for line in code.strip().splitlines())
    return hashlib.sha256(normal.encode()).hexdigest()[:16]


# Marks a field holding long free text (the store keeps no min/max statistics for it).
LONG_TEXT = {"long_text": True}


@dataclass(frozen=True, slots=True)
class Node:
    node_id: str
    parent_id: str | None
    operator: Operator
    status: Status
    step: int = 0
    depth: int = 0
    run_id: str = ""
    policy: str = ""
    plan: str = field(default="", metadata=LONG_TEXT)
    hint: str = ""  # what the policy asked for (an idea, a stage, an insight path)
    code: str = field(default="", metadata=LONG_TEXT)
    code_hash: str = ""
    exit_code: int | None = None
    error: str = field(default="", metadata=LONG_TEXT)
    stdout_tail: str = field(default="", metadata=LONG_TEXT)
    stderr_tail: str = field(default="", metadata=LONG_TEXT)
    metric: float | None = None  # valid score, normalised: higher is better
    metric_raw: float | None = None
    self_reported: float | None = None
    exec_seconds: float = 0.0
    llm_seconds: float = 0.0
    queue_seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    temperature: float = 0.0
    model: str = ""
    llm_actor: str = ""
    executor: str = ""
    node_ip: str = ""
    created_at: float = 0.0
    finished_at: float = 0.0
    # Measured by the harness (None: not measured, e.g. a whole-script reply); see DESIGN.md.
    train_seconds: float | None = None  # fit_predict wall time outside the valid/test predicts
    predict_ms_per_row: float | None = None  # predict calls on valid+test rows, per row
    model_mb: float | None = None  # pickled size of the models that made those predictions
    train_metric_raw: float | None = None  # in-sample score on a sample of train rows
    flags: str = ""  # implementation verification: comma-separated names, "" when clean
    # --reflect: what the model said about the parent before this step
    reflection: str = field(default="", metadata=LONG_TEXT)
    # JSON of the chat messages that produced the code (fine-tuning export)
    prompt: str = field(default="", metadata=LONG_TEXT)
    reply: str = field(default="", metadata=LONG_TEXT)  # the model's raw reply to that prompt
    # JSON list of its sandbox runs: [fold (-1: all folds in one run), executor, started at,
    # seconds]; the timeline draws executor time from it
    runs: str = ""
    # JSON of the literal PARAMS dict of its model code ("" when it has none): what the
    # engine's Optuna trials of this node vary (search/floor.py)
    params: str = ""
    # The kept feature program (a `features` node's id) whose chain of programs this node's code
    # applies to every frame before its model; a features node names itself. "" for none.
    feature_set: str = ""
    # A features node's gate (search/programs.Gate as JSON): the reference it was paired with,
    # the gain on each group of held-out rows, kept or not and why. "" for any other node.
    gate: str = ""
    # Of its runs' seconds, those that fitted its gate's pairs (the first pair inside its
    # scoring run, the second pair's whole run): no part of fitting it again. None: no gate.
    gate_seconds: float | None = None

    @property
    def is_ok(self) -> bool:
        return self.status is Status.OK and self.metric is not None

    @property
    def flag_list(self) -> list[str]:
        return [f for f in self.flags.split(",") if f]

    @property
    def is_buggy(self) -> bool:
        return self.status not in (Status.OK, Status.LOST)

    @property
    def has_model_code(self) -> bool:
        """Its code is LLM model code inside the engine's harness (not a whole script), so the
        engine can reuse the model part: ensembles, tuning."""
        return MODEL_START in self.code

    @property
    def is_repairable(self) -> bool:
        """A failed LLM-written candidate with code: what a debug step may start from (the
        engine's own ensembles and analysis scripts are never handed to the LLM to fix)."""
        return self.is_buggy and bool(self.code) and self.operator.traits.repairable

    def to_record(self) -> dict[str, Any]:
        row = asdict(self)
        row["operator"] = self.operator.value
        row["status"] = self.status.value
        return row

    @classmethod
    def from_record(cls, row: dict[str, Any]) -> Node:
        names = {f.name for f in fields(cls)}
        # A run stored before a text column existed reads it back as null.
        kwargs = {k: v for k, v in row.items()
                  if k in names and not (v is None and k in _TEXT_FIELDS)}
        kwargs["operator"] = Operator(kwargs["operator"])
        kwargs["status"] = Status(kwargs["status"])
        kwargs["hint"] = kwargs.get("hint") or ""  # absent from rows written before it existed
        return cls(**kwargs)


NODE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Node))
LONG_TEXT_FIELDS = frozenset(f.name for f in fields(Node) if f.metadata.get("long_text"))
_TEXT_FIELDS = frozenset(f.name for f in fields(Node) if f.default == "")
