"""The engine: a run from the command line to its outputs.

The run itself and the commands a user calls live here:
- `run`: the `python -m engine.run` command; `api`: the same from Python (`fit`, `load`,
  a predictor); `search_run`: the run object both drive (a run's life, one clock).
- `config`: the typed run configuration; each field that is a flag declares it.
- `step`: one node's life, a pure state machine from a proposal to its Node;
  `search_context`: what the steps of one search share; `budget`: the budget, pure.
- `loop`: the scheduler that keeps every LLM and executor busy; `placement`: from the
  configuration to the actors of one start.
- `memory`: the solution memory and its command.
- `predict`, `serve`, `show`, `export`: the commands on a finished run.

The concepts they use have a room each: `task` (from words or flags to the data),
`evaluation` (scoring and choosing the answer), `records` (the run directory and what a person
reads of it) and `deploy` (the saved model and the exported folder).
"""
