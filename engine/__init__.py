"""The engine: a run from the command line to its outputs.

- `run`: the `python -m engine.run` command (new runs, resume, the final selection); `api`:
  the same from Python (`fit`, `load`, a predictor).
- `config`: the typed run configuration; each field that is a flag declares it.
- `request`: a task written in words, resolved to a configuration.
- `task`: reading, checking, splitting and describing the data.
- `feasibility`: soft checks of a task before any search (request verification).
- `step`: one node's life, a pure state machine from a proposal to its Node;
  `search_context`: what the steps of one search share.
- `loop`: the scheduler that keeps every LLM and executor busy.
- `placement`: from the configuration to the actors of one start.
- `scoring`: a submission checked and scored on hidden labels, in the driver only.
- `select`: the final selection (confirmed, valid, cv).
- `store`: the run directory and its append-only Parquet parts; `runs`: its one reader.
- `summary`, `outputs`, `show`: summary.md, tree.html, plots, good/, the terminal view.
- `predict`, `export`: new rows scored by the best solution; fine-tuning data from runs.
"""

__all__ = ["api", "config", "export", "feasibility", "loop", "outputs", "placement", "predict",
           "request", "run", "runs", "scoring", "search_context", "select", "show", "step",
           "store", "summary", "task"]
