"""Scoring and choosing: how a candidate is scored, and which one becomes the answer.

- `folds`: the run's folds, fixed per run (`task/folds.json`).
- `scoring`: a submission checked and scored on hidden labels, in the driver only.
- `program_gate`: a feature program against its reference on the same held-out rows
  (`gate_round`: the pairs one run of it fitted).
- `blend`: ensemble selection over the nodes' held-out predictions.
- `select`: the final selection's rules (`--select`: confirmed, valid, cv), each giving the
  `Comparison` it decided by.
- `selection`: the `Selection` record, why the run chose its answer (the manifest's
  `selection`; summary.md, `engine.show` and tree.html render it).
- `final`: the answer made: selection applied, best/ written, its model saved; the one place a
  `Selection` is made.
"""
