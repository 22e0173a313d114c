"""One module per operator (or per few closely related ones), found by name.

- `_base`: `OperatorKind` (what the step asks of an operator), `EngineCode`, the registry
  (`register`, `kind_of`, `registered`), and the prompts asked through it (`build_prompt`,
  `repair_prompt`).
- `draft`, `improve`, `debug`, `reflect`: the search's expansions and the reflection call
  before them; `cases`: a retrieved case run as stored (`case`) and its adaptation
  (`recall`); `insights`, `rollout`: SELA's two operators; `analyze`: the data analyst.
- `baseline`, `portfolio`, `tune`, `ensemble`: the engine's own code; `features`: an
  LLM-written feature program run under the floor's best configuration and gated.

Adding an operator is adding its value to `search.node.Operator` with its traits, and one
module here that registers its kind (and is imported below).
"""

from operators.kinds import (  # noqa: F401  importing registers each kind
    analyze,
    baseline,
    cases,
    debug,
    draft,
    ensemble,
    features,
    improve,
    insights,
    portfolio,
    reflect,
    rollout,
    tune,
)
from operators.kinds._base import (
    EngineCode,
    OperatorKind,
    build_prompt,
    kind_of,
    register,
    registered,
    repair_prompt,
)

__all__ = ["EngineCode", "OperatorKind", "build_prompt", "kind_of", "register", "registered",
           "repair_prompt"]
