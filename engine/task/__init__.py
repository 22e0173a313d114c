"""The task: what a run learns, from the user's words or flags to the data every candidate reads.

- `request`: a task written in words, resolved to a spec; `request_llm`: the LLM asked for
  what the words leave open.
- `checks`: reading and checking the user's CSVs (target, task type, metric).
- `prepare`: the task loaded, split and saved (`prepare_task`, `PreparedTask`).
- `text`: description.md and the preview every prompt carries.
- `feasibility`: soft checks of a task before any search (request verification).
"""
