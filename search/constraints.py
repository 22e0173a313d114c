"""Deployment constraints a user may state, and whether a node meets them.

A node that breaks a stated constraint is not eligible as best (the Journal skips it), but it
stays in the tree: it ran, and improving it may meet the limit. A measurement the harness could
not take (a whole-script reply, a model without a `predict` call) counts as broken, since the
engine cannot promise what it did not measure; training time falls back to the script's whole
run time, an upper bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from search.node import Node


@dataclass(frozen=True, slots=True)
class Constraints:
    max_predict_ms_per_row: float | None = None
    max_model_mb: float | None = None
    max_train_seconds: float | None = None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Constraints:
        """From a run's config (missing keys: no limit, so runs made before this read)."""
        found = {f.name: values.get(f.name) for f in fields(cls)}
        return cls(**{k: float(v) for k, v in found.items() if v is not None})

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def describe(self) -> list[str]:
        """The stated limits in words, e.g. ['predict <= 5 ms per row']."""
        out = []
        if self.max_predict_ms_per_row is not None:
            out.append(f"predict <= {self.max_predict_ms_per_row:g} ms per row")
        if self.max_model_mb is not None:
            out.append(f"model <= {self.max_model_mb:g} MB")
        if self.max_train_seconds is not None:
            out.append(f"training <= {self.max_train_seconds:g} s")
        return out

    def violations(self, node: Node) -> list[str]:
        """Why `node` breaks the constraints, one short reason each; [] when it meets them."""
        out = []
        limit = self.max_predict_ms_per_row
        if limit is not None:
            value = node.predict_ms_per_row
            if value is None:
                out.append("prediction time not measured")
            elif value > limit:
                out.append(f"predicts in {value:.3g} ms per row > {limit:g}")
        limit = self.max_model_mb
        if limit is not None:
            if node.model_mb is None:
                out.append("model size not measured")
            elif node.model_mb > limit:
                out.append(f"model is {node.model_mb:.3g} MB > {limit:g}")
        limit = self.max_train_seconds
        if limit is not None:
            seconds = node.train_seconds if node.train_seconds is not None else node.exec_seconds
            if seconds > limit:
                out.append(f"trains in {seconds:.3g} s > {limit:g}")
        return out
