"""Fixed feature programs that every gate is judged against (issue 74): an expert arm and a null
arm, per benchmark task.

- **expert**: written by hand, as a domain expert would from the column names and public
  knowledge, before any gate result was looked at: Abrams' water/cement ratio for concrete,
  the ordered account and savings levels of credit-g, the Pythagorean expectation and OPS for
  moneyball, the ordinal cut/colour/clarity scales and the volume of diamonds, rooms per
  household for California, ... A gate that keeps none of them where they help the test rows
  cannot let any LLM move the answer.
- **null**: programs that add nothing any model can use, made from a task's numeric columns
  alone (so every task has them): deterministic noise, the fractional part of a sum of every
  numeric column times large irrational multipliers, which ties no row's value to its target.
  A gate must keep at most a few in a hundred.

`scripted_replies` turns an arm into the `--llm scripted:FILE.json` replies that run it through
the same search as an LLM's programs (`benchmarks.run --program-arm`); `benchmarks.gate_power`
fits them outside the search to compare keep rules.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from common.errors import UserError

ARMS = ("expert", "null")


def _program(*statements: str) -> str:
    body = "".join(f"    {s}\n" for s in statements)
    return f"def add_features(df):\n{body}    return df\n"


def _ratio(name: str, numerator: str, denominator: str) -> str:
    return _program(f"df[{name!r}] = {numerator} / {denominator}")


EXPERT: dict[str, tuple[str, ...]] = {
    "concrete-strength": (
        _ratio("water_cement", 'df["water"]', 'df["cement"]'),
        _ratio("water_binder", 'df["water"]', '(df["cement"] + df["slag"] + df["ash"])'),
        _program('df["binder"] = df["cement"] + df["slag"] + df["ash"]'),
        _ratio("plasticiser_binder", 'df["superplastic"]',
               '(df["cement"] + df["slag"] + df["ash"])'),
        _ratio("aggregate_binder", '(df["coarseagg"] + df["fineagg"])',
               '(df["cement"] + df["slag"] + df["ash"])'),
    ),
    "credit-g": (
        _program('df["checking_level"] = df["checking_status"].map({"<0": 0, "0<=X<200": 1, '
                 '">=200": 2, "no checking": 3})'),
        _program('df["savings_level"] = df["savings_status"].map({"<100": 0, "100<=X<500": 1, '
                 '"500<=X<1000": 2, ">=1000": 3, "no known savings": 4})'),
        _program('df["employment_years"] = df["employment"].map({"unemployed": 0, "<1": 0.5, '
                 '"1<=X<4": 2.5, "4<=X<7": 5.5, ">=7": 8})'),
        _ratio("monthly_payment", 'df["credit_amount"]', 'df["duration"]'),
    ),
    "kc1": (
        _ratio("comment_density", 'df["lOComment"]',
               '(df["lOCode"] + df["lOComment"] + 1)'),
        _ratio("complexity_density", 'df["v.g."]', '(df["loc"] + 1)'),
        _program('df["vocabulary"] = df["uniq_Op"] + df["uniq_Opnd"]'),
        _ratio("operand_reuse", 'df["total_Opnd"]', '(df["uniq_Opnd"] + 1)'),
        _ratio("branches_per_line", 'df["branchCount"]', '(df["loc"] + 1)'),
    ),
    "moneyball": (
        _program('df["OPS"] = df["OBP"] + df["SLG"]'),
        _program('df["OBP_x_SLG"] = df["OBP"] * df["SLG"]'),
        _program('df["pythagorean_RS"] = df["RA"] * (df["W"] / (df["G"] - df["W"])) ** 0.5'),
        _program('df["ISO"] = df["SLG"] - df["BA"]'),
        _ratio("win_share", 'df["W"]', 'df["G"]'),
    ),
    "penguins": (
        _ratio("bill_ratio", 'df["bill_length_mm"]', 'df["bill_depth_mm"]'),
        _ratio("mass_per_flipper", 'df["body_mass_g"]', 'df["flipper_length_mm"]'),
        _program('df["bill_area"] = df["bill_length_mm"] * df["bill_depth_mm"]'),
        _ratio("flipper_per_bill", 'df["flipper_length_mm"]', 'df["bill_length_mm"]'),
    ),
    "wine-quality-white": (
        _ratio("free_so2_share", 'df["free sulfur dioxide"]', 'df["total sulfur dioxide"]'),
        _program('df["bound_so2"] = df["total sulfur dioxide"] - df["free sulfur dioxide"]'),
        _program('df["total_acidity"] = df["fixed acidity"] + df["volatile acidity"] '
                 '+ df["citric acid"]'),
        _ratio("sugar_per_alcohol", 'df["residual sugar"]', 'df["alcohol"]'),
    ),
    "california-housing": (
        _ratio("rooms_per_household", 'df["total_rooms"]', 'df["households"]'),
        _ratio("bedrooms_per_room", 'df["total_bedrooms"]', 'df["total_rooms"]'),
        _ratio("people_per_household", 'df["population"]', 'df["households"]'),
        _program('df["lat_plus_lon"] = df["latitude"] + df["longitude"]',
                 'df["lat_minus_lon"] = df["latitude"] - df["longitude"]'),
    ),
    "diamonds": (
        _program('df["cut_level"] = df["cut"].map({"Fair": 0, "Good": 1, "Very Good": 2, '
                 '"Premium": 3, "Ideal": 4})'),
        _program('df["color_level"] = df["color"].map({"J": 0, "I": 1, "H": 2, "G": 3, "F": 4, '
                 '"E": 5, "D": 6})'),
        _program('df["clarity_level"] = df["clarity"].map({"I1": 0, "SI2": 1, "SI1": 2, '
                 '"VS2": 3, "VS1": 4, "VVS2": 5, "VVS1": 6, "IF": 7})'),
        _program('df["volume"] = df["x"] * df["y"] * df["z"]'),
    ),
}

# Large odd multipliers: the fractional part of a sum of every numeric column times one of them
# is spread evenly over [0, 1) and tells nothing of the target (two or three columns are not
# enough: where they are often 0, as concrete's slag and ash are, their noise names that case).
_NOISE_MULTIPLIERS = (7919.6180339887, 104729.4142135623, 12997.7320508075, 15485.2360679775,
                      1794.6457513110)  # irrational fractions: an integer column spreads too


def null_programs(numeric: Sequence[str], count: int = 8) -> tuple[str, ...]:
    """`count` programs that each add a column of noise made from every numeric column (each
    with its own multipliers), which no model can learn the target from. Not a monotone copy of
    a column: a tree splits the same way on one, but a linear or nearest-neighbour reference
    weighs the copied column twice, a real change the gate rightly keeps at times."""
    if not numeric:
        raise UserError("null programs need at least one numeric column")
    programs = []
    for i in range(count):
        terms = " + ".join(
            f'df["{c}"].fillna(0) * {_NOISE_MULTIPLIERS[(i + j) % len(_NOISE_MULTIPLIERS)]}'
            for j, c in enumerate(numeric))
        programs.append(_program(f'df["null_{i}"] = ({terms} + {i} * 0.618) % 1.0'))
    return tuple(programs)


def arm_programs(arm: str, task: str, numeric: Sequence[str]) -> tuple[str, ...]:
    """The programs of `arm` for `task` (an error naming the tasks that have an expert arm)."""
    if arm == "null":
        return null_programs(numeric)
    if arm != "expert":
        raise UserError(f"unknown program arm {arm!r}; one of {', '.join(ARMS)}")
    if task not in EXPERT:
        raise UserError(f"no expert programs for {task!r}; written for "
                         f"{', '.join(sorted(EXPERT))}")
    return EXPERT[task]


def scripted_replies(programs: Sequence[str], path: Path) -> Path:
    """Writes `programs` as the replies of `--llm scripted:PATH` (one per feature program, in
    order); once they run out the last repeats, which the engine refuses on its text as one
    already scored, so each program is judged once."""
    replies = {"features": [f"```python\n{p}```" for p in programs]}
    path.write_text(json.dumps(replies, indent=1))
    return path
