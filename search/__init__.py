"""The search: the tree of solutions and the policies that grow it. Pure: no Ray, no I/O, no
prompts (policies never import `operators`).

- `node`: the frozen node record, its operators and statuses.
- `journal`: the tree of nodes, indexed (children, best, buggy leaves, eligibility).
- `policy`: what a policy is (`propose`/`observe`), the typed `Proposal`, the registry.
- `greedy`, `mcts`, `sela`: the policies.
- `ideas`: the idea pools policies hand the model, one model family or change at a time.
- `families`: the model families the engine fits itself, their spaces, the portfolio.
- `floor`: the engine's own work for idle executors: portfolio, Optuna trials, ensembles.
- `constraints`: deployment limits a node must meet to be eligible.
- `metric`: the metric table (direction, formula, resampled form, perfect value).
- `chat`: the chat request and reply types every LLM backend speaks.
- `errors`: the engine's error tree and its exit codes.
"""

__all__ = ["chat", "constraints", "errors", "families", "floor", "greedy", "ideas", "journal",
           "mcts", "metric", "node", "policy", "sela"]
