"""Does the KeyError hint (operators/failures.py) make a debug step fix its parent? Paired: the
same failed nodes whose error is a KeyError, debugged once with the hint in the debug prompt and
once without it (every other hint kept), same sampling seed, by benchmarks.debug_pairs's own
engine step, run in the sandbox on each run's own task.

    PYTHONPATH=. python keyerror_replay.py OUT RUN_FOLDER... [--max-parents N]
"""
import argparse
import json
import time
from pathlib import Path

import operators.failures as failures
from benchmarks.debug_pairs import attempt, in_process_llm, load_cases, read_attempts, spread
from benchmarks.stats import share, sign_test

MARKER = "KeyError: '"
WITH = failures.API_HINTS
WITHOUT = tuple(h for h in WITH if h[0] != MARKER)
assert len(WITHOUT) == len(WITH) - 1, "the KeyError hint is not in this tree"

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("runs", nargs="+", type=Path)
parser.add_argument("--max-parents", type=int)
args = parser.parse_args()
cases = spread([c for c in load_cases(args.runs) if MARKER in c.parent.error],
               args.max_parents)
print(len(cases), "KeyError parents", flush=True)
args.out.mkdir(parents=True, exist_ok=True)
path = args.out / "attempts.jsonl"
done = read_attempts(path)
have = {(a["case"], a["arm"]) for a in done}
llm = in_process_llm("llama")
for case in cases:
    for arm, hints in (("hint", WITH), ("no-hint", WITHOUT)):
        if (case.key, arm) in have:
            continue
        failures.API_HINTS = hints
        start = time.perf_counter()
        row = {**attempt(case, "plain", 0, llm, 300.0), "arm": arm,
               "parent_error": case.parent.error.strip().splitlines()[-1][:200]}
        with path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        done.append(row)
        print(f"{case.task_name} {case.parent.node_id} {arm}: "
              f"{'fixed' if row['fixed'] else row['status']} {row['error'][:80]!r} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
by_case: dict[str, dict[str, bool]] = {}
for a in done:
    by_case.setdefault(a["case"], {})[a["arm"]] = bool(a["fixed"])
paired = {k: v for k, v in by_case.items() if len(v) == 2}
fixed = {arm: sum(v[arm] for v in paired.values()) for arm in ("hint", "no-hint")}
better = sum(v["hint"] and not v["no-hint"] for v in paired.values())
worse = sum(v["no-hint"] and not v["hint"] for v in paired.values())
still_key = {arm: sum(MARKER in a["error"] for a in done if a["arm"] == arm and a["case"] in paired)
             for arm in ("hint", "no-hint")}
text = (f"KeyError parents debugged in both arms: {len(paired)}\n"
        f"- fixed with the hint: {share(fixed['hint'], len(paired))}\n"
        f"- fixed without it: {share(fixed['no-hint'], len(paired))}\n"
        f"- only the hint fixed {better}, only its absence {worse} (sign test p = "
        f"{sign_test(better, worse):.2f})\n"
        f"- replies failing on a KeyError again: with the hint {still_key['hint']}, without "
        f"{still_key['no-hint']}\n")
(args.out / "summary.md").write_text(text)
print(text)
