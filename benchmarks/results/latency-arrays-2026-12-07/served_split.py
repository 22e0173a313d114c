import sys, time, statistics, functools
from pathlib import Path
from engine.api import load
from engine.records.runs import open_run
import engine.predict as ep, engine.api as ea, sandbox
T = {}
def wrap(mod, name):
    f = getattr(mod, name)
    @functools.wraps(f)
    def g(*a, **k):
        t = time.perf_counter()
        try: return f(*a, **k)
        finally: T.setdefault(name, []).append(time.perf_counter() - t)
    setattr(mod, name, g)
for n in ("feature_rows", "csv_bytes", "read_stacked", "combine_predictions", "frame_csv"):
    wrap(ep, n)
wrap(sandbox.Session, "request")
run = Path(sys.argv[1]); one = open_run(run).task().test_X.head(1)
with load(run) as p:
    for _ in range(5): p.predict(one)
    T.clear(); tot = []
    for _ in range(40):
        t = time.perf_counter(); p.predict(one); tot.append(time.perf_counter() - t)
        time.sleep(float(sys.argv[2]))
print(run.parent.name, "total %.1f" % (1e3*statistics.median(tot)), " ".join(f"{k} {1e3*statistics.median(v):.2f}" for k, v in T.items()))
