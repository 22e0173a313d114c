"""Why a run chose its answer, as one frozen record: the `Selection`.

`engine/evaluation/final.select_final` makes it, once per start, from what its rule
(`engine/evaluation/select.py`, `--select confirmed|valid|cv`) compared, the `Comparison`, and
from what became of the answer after (the holdout's refit, its saved model, an ensemble's
cross-fitted score). The manifest keeps it as JSON under `selection` (`to_json`), with the keys
runs stored before this record used, so `read` takes an old run's dict as well. summary.md,
`engine.show` and tree.html render it (engine/records/); the words that say why (`reason`,
`comparison_text`) are the record's own, so the three say the same thing.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

RULES = ("confirmed", "valid", "cv")
# Every run stored before the record kept its threshold used this share (select.CONFIDENCE).
OLD_CONFIDENCE = 0.9


@dataclass(frozen=True, slots=True)
class Candidate:
    """One node a rule weighed: `confirmed` against the baseline root on resamples, `cv` by
    its fold scores. Its test score is reported only: no rule ever reads it."""

    node_id: str
    operator: str = ""
    valid_raw: float | None = None
    p_beats_baseline: float | None = None  # confirmed: share of resamples it beats the baseline
    fold_scores: tuple[float, ...] = ()  # cv: the score of each fold that ran
    error: str = ""  # cv: why a fold failed; empty when all ran
    test_raw: float | None = None

    @property
    def cv_mean(self) -> float | None:
        return statistics.fmean(self.fold_scores) if self.fold_scores and not self.error else None

    @property
    def cv_sd(self) -> float | None:
        return statistics.stdev(self.fold_scores) if len(self.fold_scores) > 1 else None

    def to_json(self, rule: str) -> dict[str, Any]:
        out: dict[str, Any] = {"node_id": self.node_id, "operator": self.operator,
                               "valid_raw": self.valid_raw}
        if rule == "cv":
            out |= {"fold_scores": list(self.fold_scores), "error": self.error,
                    "cv_mean": self.cv_mean, "cv_sd": self.cv_sd}
        else:
            out["p_beats_baseline"] = self.p_beats_baseline
        return out | {"test_raw": self.test_raw}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Candidate:
        return cls(str(raw["node_id"]), str(raw.get("operator") or ""), raw.get("valid_raw"),
                   raw.get("p_beats_baseline"), tuple(raw.get("fold_scores") or ()),
                   str(raw.get("error") or ""), raw.get("test_raw"))


@dataclass(frozen=True, slots=True)
class EnsembleCheck:
    """`confirmed`: the first engine-written ensemble among the confirmed nodes, against the
    best of them; it is preferred unless the best beats it in `confidence` of resamples."""

    node_id: str
    best: str  # the confirmed node with the best valid score
    p_best_beats_it: float
    preferred: bool


@dataclass(frozen=True, slots=True)
class Comparison:
    """What one rule weighed to pick its winner (engine/evaluation/select.py)."""

    winner: str | None  # None: nothing eligible, or the rule found none (the best valid wins)
    search_best: str | None = None  # the best valid score, which the search steered by
    baseline: str | None = None  # confirmed: the root every candidate was compared with
    confidence: float | None = None  # confirmed: the share of resamples a node must win
    candidates: tuple[Candidate, ...] = ()
    # confirmed: nodes not checked again, each with the candidate whose valid predictions it
    # repeats byte for byte
    same_predictions: tuple[tuple[str, str], ...] = ()
    ensemble_check: EnsembleCheck | None = None
    note: str = ""  # why the rule fell back to the best valid score, or kept the best as it is


@dataclass(frozen=True, slots=True)
class Refit:
    """The holdout's answer refitted on every train + valid row (or on `rows` of them, what the
    budget afforded after a search on a sample): its test score, or why not."""

    test_raw: float | None = None
    error: str = ""
    rows: int | None = None


@dataclass(frozen=True, slots=True)
class Latency:
    """The answer's warm one-row latency against the limit (engine/evaluation/latency.py):
    a request's own work plus each member's models, in ms, and the nodes the rule chose
    first that were over the limit, in the order it chose them."""

    limit_ms: float
    answer_ms: float | None = None  # None: not measured (no fitted models to time)
    request_ms: float | None = None
    members: tuple[tuple[str, float], ...] = ()  # (member, its models on one row)
    held_back: tuple[tuple[str, float], ...] = ()  # (node, its one-row ms) over the limit
    none_fit: bool = False  # no measured node fitted: the fastest was taken
    # the first node held back: its members' models on one row, what made it slow
    held_back_members: tuple[tuple[str, float], ...] = ()
    # its members not measured (fold models too big to keep): its ms is a lower bound
    held_back_unmeasured: tuple[str, ...] = ()
    served_ms: float | None = None  # the saved answer's one-row p50 as served (None: not)
    served_over: tuple[tuple[str, float], ...] = ()  # (node, served ms) chosen, then replaced

    def text(self) -> str:
        """One line: the answer's one-row p50 and what it is made of."""
        if self.answer_ms is None:
            return f"one row: not measured (limit {self.limit_ms:g} ms)"
        over = f", over the {self.limit_ms:g} ms limit" if self.answer_ms > self.limit_ms else ""
        parts = ", ".join(f"{node} {ms:.1f}" for node, ms in self.members)
        served = ""
        if self.served_ms is not None:
            served_over = (f", over the {self.limit_ms:g} ms limit"
                           if self.served_ms > self.limit_ms else "")
            served = f"; served, {self.served_ms:.1f} ms p50{served_over}"
        return (f"one row {self.answer_ms:.1f} ms p50 warm{over} (request {self.request_ms:.1f}"
                f" + models {parts} ms){served}")

    def change(self) -> str:
        """What the limit changed, in words ("" when nothing)."""
        served = "; ".join(f"served, {node} took {ms:.0f} ms, so the rule chose again with a "
                           "request costing what serving added" for node, ms in self.served_over)
        if not self.held_back:
            return f"held back by the {self.limit_ms:g} ms one-row limit: {served}" if served \
                else ""
        at_least = "at least " if self.held_back_unmeasured else ""
        slow = ", ".join(f"{node} ({at_least * (i == 0)}{ms:.0f} ms"
                         f"{self._parts() if i == 0 else ''})"
                         for i, (node, ms) in enumerate(self.held_back))
        if self.none_fit:
            return (f"no measured node predicts one row within {self.limit_ms:g} ms "
                    f"({slow} chosen first): the fastest is taken")
        return f"held back by the {self.limit_ms:g} ms one-row limit: {slow}" + (
            f"; {served}" if served else "")

    def _parts(self) -> str:
        """The first held-back node's models, slowest first: ": a1 230.2, b2 1.1" ("" when
        it is one node alone or was not told apart), then those not measured."""
        if len(self.held_back_members) + len(self.held_back_unmeasured) < 2:
            return ""
        slowest = sorted(self.held_back_members, key=lambda part: -part[1])
        unmeasured = (f"; not measured: {', '.join(self.held_back_unmeasured)}"
                      if self.held_back_unmeasured else "")
        return ": " + ", ".join(f"{node} {ms:.1f}" for node, ms in slowest) + unmeasured

    def to_json(self) -> dict[str, Any]:
        return {"limit_ms": self.limit_ms, "answer_ms": self.answer_ms,
                "request_ms": self.request_ms, "members": dict(self.members),
                "held_back": dict(self.held_back), "none_fit": self.none_fit,
                "held_back_members": dict(self.held_back_members),
                "held_back_unmeasured": list(self.held_back_unmeasured),
                "served_ms": self.served_ms, "served_over": dict(self.served_over)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Latency:
        return cls(float(raw["limit_ms"]), raw.get("answer_ms"), raw.get("request_ms"),
                   tuple((raw.get("members") or {}).items()),
                   tuple((raw.get("held_back") or {}).items()), bool(raw.get("none_fit")),
                   tuple((raw.get("held_back_members") or {}).items()),
                   tuple(raw.get("held_back_unmeasured") or ()), raw.get("served_ms"),
                   tuple((raw.get("served_over") or {}).items()))


@dataclass(frozen=True, slots=True)
class Selection:
    """The run's answer and why: its node, the rule, what the rule compared, and what became
    of the answer after it was chosen."""

    rule: str  # --select: confirmed, valid or cv
    method: str  # the rule in words
    node_id: str | None  # the answer (best/); None when no node was eligible
    operator: str  # the answer's kind ("" when none)
    comparison: Comparison
    note: str = ""  # the answer's own fallback: a winner that failed when run again
    cross_fitted_raw: float | None = None  # an ensemble answer's score with honest weights
    refit: Refit | None = None
    # the saved model's record (engine/deploy/saved_model.py: saved, or why not)
    model: Mapping[str, Any] | None = None
    latency: Latency | None = None  # None: a run stored before it, or nothing to time

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return self.comparison.candidates

    @property
    def refit_test_raw(self) -> float | None:
        return self.refit.test_raw if self.refit is not None else None

    def with_tests(self, tests: Mapping[str, float | None]) -> Selection:
        """The record with each candidate's test score (reported only)."""
        return replace(self, comparison=replace(self.comparison, candidates=tuple(
            replace(c, test_raw=tests.get(c.node_id)) for c in self.candidates)))

    def comparison_text(self, candidate: Candidate) -> str:
        """How one candidate compared, in words."""
        if self.rule == "cv" or candidate.fold_scores or candidate.error:
            if candidate.cv_mean is None:
                return "failed: " + (candidate.error[:60] or "no fold ran")
            return f"cv {candidate.cv_mean:.5g} ± {candidate.cv_sd or 0:.2g}"
        if candidate.p_beats_baseline is None:
            return "no kept predictions"
        return f"beats the baseline in {candidate.p_beats_baseline:.1%} of resamples"

    def reason(self) -> str:
        """Why the answer is the answer, in one sentence."""
        change = self.latency.change() if self.latency is not None else ""
        return f"{change}; {self._rule_reason()}" if change else self._rule_reason()

    def _rule_reason(self) -> str:
        comparison = self.comparison
        if self.node_id is None:
            return "no node was eligible"
        if self.note:
            return self.note
        if comparison.note:
            return comparison.note
        if self.rule == "valid":
            return "the best valid score, as the search saw it"
        own = next((c for c in self.candidates if c.node_id == self.node_id), None)
        if self.rule == "cv":
            return ("the best mean score of the cross-validation"
                    + (f" ({self.comparison_text(own)})" if own is not None else ""))
        if self.rule != "confirmed":
            return self.method
        share = f"{comparison.confidence or OLD_CONFIDENCE:.0%}"
        check = comparison.ensemble_check
        if check is not None and check.preferred:
            return (f"an engine-written ensemble that the best confirmed node ({check.best}) "
                    f"beats in only {check.p_best_beats_it:.1%} of resamples (under {share}): "
                    "preferred, since averaging near-equal models lowers variance")
        if own is None:
            tried = len(self.candidates)
            return (f"the baseline root stays: no node above it beat it in {share} of "
                    f"resamples ({tried} compared)" if tried else
                    "the baseline root stays: no node scored above it")
        text = (f"it beats the baseline root ({comparison.baseline}) in "
                f"{own.p_beats_baseline or 0:.1%} of resamples (at least {share}) and has the "
                "best valid score of the nodes that do")
        if check is not None:
            text += (f"; ensemble {check.node_id} not preferred: it beats that in "
                     f"{check.p_best_beats_it:.1%} of resamples")
        return text

    def to_json(self) -> dict[str, Any]:
        """The manifest's `selection`: the keys older runs used, and the record's new ones."""
        comparison = self.comparison
        out: dict[str, Any] = {
            "rule": self.rule, "method": self.method, "winner": self.node_id,
            "operator": self.operator, "search_best": comparison.search_best,
            "baseline": comparison.baseline, "confidence": comparison.confidence,
            "candidates": [c.to_json(self.rule) for c in self.candidates],
        }
        if comparison.same_predictions:
            out["same_predictions"] = dict(comparison.same_predictions)
        if comparison.ensemble_check is not None:
            check = comparison.ensemble_check
            out["ensemble_check"] = {"node_id": check.node_id, "best": check.best,
                                     "p_best_beats_it": check.p_best_beats_it,
                                     "preferred": check.preferred}
        note = "; ".join(n for n in (comparison.note, self.note) if n)
        if note:
            out["note"] = note
        if self.cross_fitted_raw is not None:
            out["cross_fitted_raw"] = self.cross_fitted_raw
        if self.refit is not None:
            out["refit"] = ({"test_raw": self.refit.test_raw, "rows": self.refit.rows}
                            if not self.refit.error else {"error": self.refit.error})
        if self.model is not None:
            out["model"] = dict(self.model)
        if self.latency is not None:
            out["latency"] = self.latency.to_json()
        return out

    @classmethod
    def read(cls, manifest: Mapping[str, Any]) -> Selection | None:
        """The record a run's manifest holds (one written before the record too), or None
        when the run has made no selection yet."""
        raw = manifest.get("selection")
        if not isinstance(raw, Mapping) or not raw:
            return None
        method = str(raw.get("method") or "")
        rule = str(raw.get("rule") or _old_rule(method))
        candidates = tuple(Candidate.from_json(c) for c in raw.get("candidates") or ())
        winner = raw.get("winner")
        check = raw.get("ensemble_check")
        confidence = raw.get("confidence")
        if confidence is None and rule == "confirmed":
            confidence = OLD_CONFIDENCE
        best = next((c.node_id for c in candidates if (c.p_beats_baseline or 0.0)
                     >= (confidence or OLD_CONFIDENCE)), "")
        refit = raw.get("refit")
        comparison = Comparison(
            winner=winner, search_best=raw.get("search_best", winner),
            baseline=raw.get("baseline"), confidence=confidence, candidates=candidates,
            same_predictions=tuple((raw.get("same_predictions") or {}).items()),
            ensemble_check=None if not check else EnsembleCheck(
                str(check["node_id"]), str(check.get("best") or best),
                float(check["p_best_beats_it"]),
                bool(check.get("preferred", check["node_id"] == winner))),
            note=str(raw.get("note") or ""))
        operator = raw.get("operator")
        if operator is None:  # an old record named the kind only among its candidates
            operator = next((c.operator for c in candidates if c.node_id == winner), "")
        return cls(rule, method, winner, str(operator), comparison,
                   cross_fitted_raw=raw.get("cross_fitted_raw"),
                   refit=None if not isinstance(refit, Mapping) else Refit(
                       refit.get("test_raw"), str(refit.get("error") or ""),
                       refit.get("rows")),
                   model=raw.get("model"),
                   latency=Latency.from_json(raw["latency"]) if raw.get("latency") else None)


def _old_rule(method: str) -> str:
    """The rule of a record written before it named one, from its words."""
    if method.startswith("confirmed"):
        return "confirmed"
    if "-fold cv" in method or method == "cv":
        return "cv"
    return "valid"
