"""The engine's own model code: a (family, params) pair of `search.families` as the model part
of a harness script, from the family's record (its import lines and constructor text). No LLM
writes it, so it is trusted to run every fold in one process.

The hyperparameters sit in one `PARAMS` dict, the convention the prompts ask the model to keep
too, so a tuned configuration and an LLM's edit of it read the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from operators.context import TaskContext
from operators.features import programs_block
from operators.harness import model_functions
from search.families import FAMILIES, TRIAL_SEED


def model_code(ctx: TaskContext, family: str, params: dict[str, Any],
               programs: Sequence[str] = (), *, check: bool = False,
               gate_pairs: Sequence[tuple[int, int]] = (),
               gate_without: bool = True) -> str:
    """The model part (imports, PARAMS, fit_predict) of `family` with `params`, on the
    features of the kept feature `programs` applied in order (operators/features.py; `check`:
    the newest is checked on the training rows first). With `gate_pairs`, it also defines the
    gate's fresh pairs (`gate_part`; `gate_without`: both sides of each, or the side with the
    program alone)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}")
    record = FAMILIES[family]
    imports, model = record.imports, record.model(ctx.task_type == "regression")
    features, step = "", f"Encoded({model})"
    if programs:
        features = programs_block(programs, check=check) + "\n\n"
        step = f"Encoded({model}, FEATURE_PROGRAMS)"
    after_fit = ("    report_importances(model.model, model.names_)\n"
                 if check and programs else "")
    gate = gate_part(model, gate_pairs, without=gate_without) \
        if programs and gate_pairs else ""
    return (f"{imports}\n\n{features}PARAMS = {params!r}\n\n\n"
            + model_functions(ctx, step, after_fit) + gate)


def seeded(ctx: TaskContext, family: str) -> bool:
    """Whether `family`'s model takes a seed (another seed fits another model)."""
    return FAMILIES[family].seeded(ctx.task_type == "regression")


def gate_part(model: str, pairs: Sequence[tuple[int, int]], *, without: bool = True) -> str:
    """`gate_models(seed)`: the configuration built afresh with `seed`, with the chain's newest
    program and without it, and the (split, seed) pairs the harness fits them with on every
    fold of the split (`GATE_PAIRS`, search.programs.gate_pairs; operators/harness.py writes
    their held-out predictions to submission/gate.csv). `without` False: the side with the
    program alone, for a search that kept the side without it from an earlier program's run
    on the same configuration and feature set (the same models on the same rows). Fresh seeds,
    not the reference's own: its stored score is the best of many trials and so partly its
    seed's luck (on concrete, the floor's best LightGBM scored RMSE 4.98 with its own seed and
    5.15 to 5.48 with seven others); a pair shares configuration, rows and seed, and differs
    only by the program."""
    seeded = model.replace(TRIAL_SEED, "random_state=seed")
    other = (f"\n            Encoded({seeded}, FEATURE_PROGRAMS[:-1])" if without else "")
    return (f"\n\nGATE_PAIRS = {tuple(pairs)!r}\n"
            + "\n\ndef gate_models(seed):\n"
            f"    return (Encoded({seeded}, FEATURE_PROGRAMS),{other})\n")
