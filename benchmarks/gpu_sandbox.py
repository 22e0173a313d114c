"""Does a candidate get the GPU inside the sandbox (`--executor-gpus`)? Run on a GPU machine:

    python -m benchmarks.gpu_sandbox [--size 8192] [--memory-gib 6] [-o results.json]

The same candidate (torch: a bf16 matrix product on `cuda`, timed after warm-up) runs:
- `direct`: a plain subprocess, no limits: what the GPU gives;
- `direct-rlimit-as` / `direct-rlimit-data`: a plain subprocess under the candidate's memory
  cap as RLIMIT_AS or as RLIMIT_DATA (what the sandbox's shim sets without / with a GPU);
- `sandbox-gpu`: `sandbox.run_script` with CUDA_VISIBLE_DEVICES=0, as Ray sets it for an
  executor with a GPU share (the NVIDIA device nodes bound into bwrap's private /dev);
- `sandbox-no-gpu`: the same with CUDA_VISIBLE_DEVICES unset: the GPU must be invisible;
- `sandbox-gpu-ram`: with the GPU, a candidate that asks for more RAM than its cap: the cap
  must still stop it.
One JSON record per way: the candidate's own report (CUDA available, device, TFLOP/s) or its
error. Needs torch in this interpreter and bwrap on PATH; uses no Ray and no engine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sandbox import Limits, isolation_mode, run_script

MATMUL = """
import json, time
import torch
report = {"cuda": torch.cuda.is_available()}
if report["cuda"]:
    n = SIZE
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / 10
    report |= {"device": torch.cuda.get_device_name(0),
               "tflops": round(2 * n ** 3 / seconds / 1e12, 1)}
print("REPORT " + json.dumps(report))
"""

RAM_HOG = """
import json
import numpy as np
import torch
ok = torch.cuda.is_available()
try:
    hog = np.ones(GIB * 2**30 // 8)
    print("REPORT " + json.dumps({"cuda": ok, "ram_capped": False}))
except MemoryError:
    print("REPORT " + json.dumps({"cuda": ok, "ram_capped": True}))
"""


def report(stdout: str) -> dict[str, Any] | None:
    for line in stdout.splitlines():
        if line.startswith("REPORT "):
            return dict(json.loads(line[len("REPORT "):]))
    return None


def direct(code: str, cap: int | None, memory_bytes: int) -> dict[str, Any]:
    def limit() -> None:
        if cap is not None:
            resource.setrlimit(cap, (memory_bytes, memory_bytes))

    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          preexec_fn=limit, timeout=300, check=False)
    return {"exit": proc.returncode, "seconds": round(time.perf_counter() - start, 1),
            "report": report(proc.stdout), "error": proc.stderr.strip().splitlines()[-1:]}


def sandboxed(code: str, visible: str | None, memory_bytes: int) -> dict[str, Any]:
    if visible is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    result = run_script(code, {}, Limits(wall_seconds=300, memory_bytes=memory_bytes))
    return {"status": result.status, "seconds": round(result.seconds, 1),
            "report": report(result.stdout_tail),
            "error": result.stderr_tail.strip().splitlines()[-1:]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_sandbox", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=8192, help="matrix side (default 8192)")
    p.add_argument("--memory-gib", type=int, default=6,
                   help="the candidate's memory cap in GiB (default 6, the sandbox's default)")
    p.add_argument("-o", "--out", type=Path, help="also write the records here as JSON")
    args = p.parse_args(argv)
    memory = args.memory_gib * 2**30
    matmul = MATMUL.replace("SIZE", str(args.size))
    hog = RAM_HOG.replace("GIB", str(args.memory_gib + 2))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0") or "0"
    records = {
        "isolation": isolation_mode(),
        "direct": direct(matmul, None, memory),
        "direct-rlimit-as": direct(matmul, resource.RLIMIT_AS, memory),
        "direct-rlimit-data": direct(matmul, resource.RLIMIT_DATA, memory),
        "sandbox-gpu": sandboxed(matmul, visible, memory),
        "sandbox-no-gpu": sandboxed(matmul, None, memory),
        "sandbox-gpu-ram": sandboxed(hog, visible, memory),
    }
    text = json.dumps(records, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
