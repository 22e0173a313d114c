"""Operators: pure functions from the search context to a chat prompt, and from a reply to code.

- `context`: what the operators know about a task (`TaskContext`).
- `harness`: the fixed script around LLM-written model code, and the engine's own code
  (baseline root, ensembles).
- `measure`: what the harness measures (time, size, in-sample score) and how it is read back.
- `failures`: what a prompt shows of a failure, and the API hints.
- `kinds`: one module per operator (its prompt, reply reading, engine-written code and run
  limit), found by name through a registry (`kinds.kind_of`).
- `prompts`: what every prompt shares (system text, the stable task prefix).
- `analyst`: the data-exploration script (seed 003) and its findings.
- `replies`: reply parsing (code, ideas, reflections).
- `imports`: deterministic repair of a small model's import slips.
- `flags`: implementation-verification flags of a node.

No Ray, no I/O: every function is tested on strings. Policies (`search/`) never import this
package; the engine's step (`engine.step`) joins the two.
"""

__all__ = ["analyst", "context", "failures", "flags", "harness", "imports", "kinds", "measure",
           "prompts", "replies"]
