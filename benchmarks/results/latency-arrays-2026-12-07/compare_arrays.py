"""Run from the repository root: `python benchmarks/results/latency-arrays-2026-12-07/compare_arrays.py RUN...`.
In one process: a saved answer's 5-fold one-row `_treeml_predict` p50, its own Encoded._arrays
this checkout's against the old one (1bfe819's), each patched in, the median of 3 interleaved rounds; and 200 rows
predicted identically. Run as the sandbox runs: OMP_NUM_THREADS=1."""
import pickle, statistics, subprocess, sys, time, types
from pathlib import Path
import numpy as np, pandas as pd

OLD = subprocess.run(["git", "-C", str(Path(__file__).parent), "show", "1bfe819:operators/prepare_source.py"],
                     capture_output=True, text=True).stdout
scope = {}
exec(OLD, scope)
old_src = scope["PREPARE_SOURCE"]
sys.path.insert(0, ".")
from operators.prepare_source import PREPARE_SOURCE as new_src  # this checkout's

def load(run):
    run = Path(run)
    module = types.ModuleType("treeml_model")
    module.__file__ = "input/solution.py"
    sys.modules["treeml_model"] = module
    exec((run / "best/solution.py").read_text(), module.__dict__)
    models = [pickle.loads(p.read_bytes()[len(b"treeml-model\n"):])
              for p in sorted((run / "best/model").glob("fold-*.pkl"))]
    return module, models

def p50(fn, n=60):
    for _ in range(5): fn()
    times = []
    for _ in range(n):
        t = time.perf_counter(); fn(); times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)

for run in sys.argv[1:]:
    module, models = load(run)
    rows = pd.read_csv(Path(run) / "task" / "test.csv")
    target = module.__dict__.get("TARGET")
    rows = rows.drop(columns=[c for c in rows.columns if c == target], errors="ignore")
    one, many = rows.iloc[:1], rows.iloc[:200]
    run_all = lambda X: [module._treeml_predict(m, X.copy()) for m in models]
    arrays = {}
    for name, source in (("new", new_src), ("old", old_src)):
        ns = {}
        exec(source.split("\n\ndef prepare(")[0], {**module.__dict__, "__name__": "x"}, ns)
        arrays[name] = ns["Encoded"]._arrays
    saved = module.Encoded._arrays
    times, preds = {"new": [], "old": []}, {}
    for _ in range(3):  # rounds interleaved: the first timed in a process reads slow
        for name, method in arrays.items():
            module.Encoded._arrays = method
            times[name].append(p50(lambda: run_all(one)))
            preds[name] = run_all(many)
    module.Encoded._arrays = saved
    new_ms, old_ms = statistics.median(times["new"]), statistics.median(times["old"])
    new_many, old_many = preds["new"], preds["old"]
    def eq(a, b):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype.kind in "fi" and b.dtype.kind in "fi":
            return np.allclose(a, b, equal_nan=True)
        return np.array_equal(a.astype(str), b.astype(str))
    same = all(eq(a, b) for a, b in zip(new_many, old_many))
    print(f"{Path(run).parent.name}: old {old_ms:.2f} ms, new {new_ms:.2f} ms, same {same}")
