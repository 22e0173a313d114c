"""What if the final selection ranked ensembles by their cross-fitted score? Per run folder under
the paths given: the candidates its `confirmed` selection compared (manifest `selection`),
each ensemble scored cross-fitted (`engine.evaluation.select.cross_fitted_score`: each fold
blended with weights selected on the other folds) and every other candidate by its valid score;
the candidate best by those scores against the run's answer, on the test rows.

    .venv/bin/python benchmarks/results/llm-gain-2026-12-05/cross_fitted_choice.py RUNS...

Only candidates that beat the baseline root with the selection's confidence compete, as in the
run; nothing runs (kept predictions only). Signed so that above zero the other choice is better.
"""

import statistics
import sys
from pathlib import Path

from benchmarks.program_gates import run_dirs
from engine.evaluation.folds import dev_labels
from engine.evaluation.select import CONFIDENCE, cross_fitted_score
from engine.records.runs import open_run


def choice(run: Path) -> tuple[str, float] | None:
    """The table's line for `run` and the relative test gain of the other choice; None when
    the run has no folds or its answer was not among eligible candidates."""
    stored = open_run(run)
    record = stored.manifest.get("selection") or {}
    folds = stored.store.load_folds()
    eligible = [c for c in record.get("candidates", [])
                if (c.get("p_beats_baseline") or 0) >= CONFIDENCE
                and c.get("test_raw") is not None]
    winner = record.get("winner")
    if folds is None or winner not in {c["node_id"] for c in eligible}:
        return None
    task = stored.task()
    truth = dev_labels(task).iloc[folds.held_out]
    groups = folds.groups(int(stored.config.get("seed", 0)))
    sign = 1.0 if task.metric.maximize else -1.0
    scored = {}
    for candidate in eligible:
        node = stored.journal.get(candidate["node_id"])
        cross = cross_fitted_score(task, node,
                                   lambda i: stored.store.read_predictions(i, "valid"),
                                   truth, groups)
        raw = candidate["valid_raw"] if cross is None else cross
        scored[candidate["node_id"]] = (sign * raw, raw, candidate)
    _, answer_raw, answer = scored[winner]
    other = max(scored.values(), key=lambda s: s[0])[2]
    gain = sign * (other["test_raw"] - answer["test_raw"]) / abs(answer["test_raw"])
    name = "/".join(run.parts[-5:-2])
    return (f"| {name} | {winner} ({answer['valid_raw']:.5g}, {answer_raw:.5g}) | "
            f"{'same' if other is answer else other['node_id']} | {answer['test_raw']:.5g} | "
            f"{other['test_raw']:.5g} | {gain:+.3%} |"), gain


print("| run | answer (its valid, cross-fitted) | by cross-fitted scores | answer's test | "
      "that one's test | gain |")
print("|---|---|---|---|---|---|")
gains = []
for run in run_dirs([Path(p) for p in sys.argv[1:]]):
    if (line := choice(run)) is not None:
        print(line[0])
        gains.append(line[1])
changed = [g for g in gains if g != 0]
print(f"\n{len(gains)} runs; another answer in {len(changed)}: better on the test rows in "
      f"{sum(g > 0 for g in changed)}, worse in {sum(g < 0 for g in changed)}; median relative "
      f"gain where changed {statistics.median(changed) if changed else 0:+.3%}, mean over all "
      f"runs {statistics.fmean(gains) if gains else 0:+.3%}")
