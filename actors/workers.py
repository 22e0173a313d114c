"""Ray actors: one LLM actor per model replica, one executor actor per sandbox slot.

Actors own their mutable state (a loaded model, a sandbox); the driver owns the Journal. Task
inputs arrive as one object-store reference and results return as values, so remote
executors need no shared disk.

Placement is by Ray resources. An LLM actor asks for its GPUs (a vLLM replica with
tensor parallelism N gets a STRICT_PACK placement group of N one-GPU bundles, so its shards
share a node) and, on a cluster, one unit of a custom resource such as `llm` that only the
LLM nodes declare; an executor asks for a CPU, optionally a fraction of a GPU, and a custom
resource such as `executor`. The embedded model's actor leaves its CPU idle between requests
(a feature program's reply takes seconds, its scoring longer): each such CPU gets a spare
executor, which asks for no CPU and runs its candidates at niceness 19, so it runs on what the
LLM leaves idle, and once no LLM is asked again it runs as any other.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.llm import located
from common.chat import ChatPrompt, Reply
from common.errors import BackendError
from sandbox import ExecResult, Limits, SandboxError, WarmRunner, run_script


@contextlib.contextmanager
def ray_session(address: str | None, actors: int) -> Iterator[None]:
    """Ray for one start of a run: join the cluster at `address`, or start a private one on
    this machine with a CPU for each of the run's `actors` at least, and leave it when the
    start ends. A program that already called `ray.init` (a notebook driving engine.api, a
    test session) keeps its Ray: the run's actors go at the end, the session stays."""
    if ray.is_initialized():
        yield
        return
    if address:
        _join(address)
    else:
        start_private_ray(max(os.cpu_count() or 2, actors))
    try:
        yield
    finally:
        ray.shutdown()


def start_private_ray(cpus: int) -> None:
    """A private Ray on this machine that places actors on up to `cpus` CPUs."""
    # A private cluster keeps the token authentication Ray turns on by itself; its notice that
    # it did so is not the user's business (the engine's own lines come first).
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
        logging.ERROR)
    # "local" starts a private cluster even when another Ray runs on this machine.
    ray.init(address="local", num_cpus=cpus, include_dashboard=False,
             object_store_memory=100 * 2**20, log_to_driver=False, configure_logging=False)


def _join(address: str) -> None:
    # ray.init(address=...) can wait a long time on an unreachable head: bound it.
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    pool = ThreadPoolExecutor(1)
    attempt = pool.submit(ray.init, address=address, log_to_driver=False,
                          configure_logging=False)
    try:
        attempt.result(timeout=60)
    except FutureTimeout as exc:
        raise BackendError(f"no Ray cluster answered at {address!r} within 60 s; "
                           "start one with `ray start --head` or drop --address") from exc
    except Exception as exc:
        raise BackendError(f"cannot join the Ray cluster at {address!r}: "
                           f"{str(exc).splitlines()[0]}") from exc
    finally:
        pool.shutdown(wait=False)


@dataclass(frozen=True, slots=True)
class ExecOutcome:
    result: ExecResult
    executor: str
    node_ip: str


class _LLMWorker:
    """Holds a blocking backend; Ray runs up to max_concurrency calls in threads."""

    def __init__(self, spec: str, name: str, options: dict[str, Any]) -> None:
        from actors.llm import make_llm

        self.name = name
        self.llm: Any = make_llm(spec, **options)

    def model(self) -> str:
        return str(self.llm.model)

    def generate(self, prompts: list[ChatPrompt]) -> list[Reply]:
        return list(self.llm.generate(prompts))

    def node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())


class _AsyncLLMWorker:
    """Holds a batching backend (vLLM): an async actor, so concurrent calls interleave in one
    event loop and their requests share the engine's running batch."""

    def __init__(self, spec: str, name: str, options: dict[str, Any]) -> None:
        from actors.llm import make_llm

        self.name = name
        self.llm: Any = make_llm(spec, **options)

    async def model(self) -> str:
        return str(self.llm.model)

    async def generate(self, prompts: list[ChatPrompt]) -> list[Reply]:
        return list(await self.llm.agenerate(prompts))

    async def stats(self) -> dict[str, float]:
        return dict(self.llm.stats())

    async def node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())


class _ExecutorWorker:
    def __init__(self, name: str, nice: int = 0) -> None:
        self.name = name
        self.node_ip = _node_ip()
        self.nice = nice  # the least niceness its candidates run at (a spare's: SPARE_NICE)
        self.warm = WarmRunner()  # engine-written runs, forked from a session that imported
        self.warm_failure = ""  # why the warm session could not start: runs go cold

    def run(self, code: str, inputs: dict[str, bytes], limits: Limits,
            preload: tuple[str, ...] = ()) -> ExecOutcome:
        """`code` run in a fresh sandbox; with `preload` (engine-written code only), forked
        from this executor's warm session that imported those modules once."""
        limits = replace(limits, nice=max(limits.nice, self.nice))
        if preload and not self.warm_failure:
            try:
                return ExecOutcome(self.warm.run(code, inputs, limits, preload), self.name,
                                   self.node_ip)
            except SandboxError as exc:  # then every run of this executor goes cold
                self.warm_failure = str(exc)
                logging.getLogger(__name__).warning("executor %s runs cold: %s", self.name, exc)
        return ExecOutcome(run_script(code, inputs, limits), self.name, self.node_ip)

    def set_nice(self, nice: int) -> None:
        """Candidates from the next run on run at least this nice (a spare taking the CPU of
        an LLM that is asked no more: 0)."""
        self.nice = nice

    def pid(self) -> int:
        return os.getpid()

    def peak_candidate_bytes(self) -> int:
        """The most resident memory one of the candidates this executor ran held (each cold
        one ran as its child: the kernel keeps the largest finished child's peak; the warm
        session reports its runs')."""
        return max(peak_bytes(resource.RUSAGE_CHILDREN), self.warm.peak_bytes)

    def node_id(self) -> str:
        """The Ray node this executor lives on (fault tests remove that node)."""
        return str(ray.get_runtime_context().get_node_id())


# Wrapped rather than decorated so type checkers see the plain classes and Ray sees actors.
LLMActor: Any = ray.remote(_LLMWorker)
AsyncLLMActor: Any = ray.remote(_AsyncLLMWorker)
ExecutorActor: Any = ray.remote(_ExecutorWorker)


def peak_bytes(who: int = resource.RUSAGE_SELF) -> int:
    """The peak resident memory of this process (RUSAGE_SELF) or of its largest finished child
    (RUSAGE_CHILDREN), in bytes (Linux counts it in KiB)."""
    return resource.getrusage(who).ru_maxrss * 1024


def _node_ip() -> str:
    try:
        return ray.util.get_node_ip_address()
    except Exception:
        return socket.gethostname()


@dataclass(frozen=True)
class Placement:
    """What one actor asks Ray for. `gpus > 1` (tensor parallel) means a placement group of
    that many one-GPU bundles packed on one node; custom `resources` pin actors to the nodes
    that declare them (cluster.yaml: `llm` on GPU nodes, `executor` on CPU nodes)."""

    num_cpus: float = 1.0
    gpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)

    @property
    def grouped(self) -> bool:
        return self.gpus > 1


class LLMPool:
    """The replicas of one LLM spec: started, replaced when one dies, placement groups freed.

    A replaced replica reuses its predecessor's placement group: the GPUs stay reserved, and
    Ray has already killed the dead actor's vLLM workers with it (they were its children).
    """

    def __init__(self, spec: str, options: dict[str, Any], *, concurrency: int,
                 placement: Placement = Placement(), prefix: str = "llm") -> None:
        from actors.llm import backend_of

        self.spec = spec
        self.options = options
        self.concurrency = concurrency
        self.placement = placement
        self.prefix = prefix
        self.actor_class = AsyncLLMActor if backend_of(spec).is_async else LLMActor
        self.actors: dict[str, Any] = {}
        self.groups: dict[str, PlacementGroup] = {}

    def start(self, replicas: int) -> list[tuple[str, Any]]:
        started = [self._start(f"{self.prefix}-{i}") for i in range(replicas)]
        return [(name, self.actors[name]) for name in started]

    def restart(self, name: str) -> Any:
        old = self.actors.get(name)
        if old is not None:
            with contextlib.suppress(Exception):  # already dead, or hung: free its resources
                ray.kill(old, no_restart=True)
        self._start(name)
        return self.actors[name]

    def close(self) -> None:
        for group in self.groups.values():
            with contextlib.suppress(Exception):  # Ray may be shutting down already
                remove_placement_group(group)
        self.groups.clear()

    def _start(self, name: str) -> str:
        p = self.placement
        options: dict[str, Any] = {"max_concurrency": self.concurrency}
        if p.grouped:
            group = self.groups.get(name)
            if group is None:
                # The actor's own CPU and any custom resource ride in the first bundle.
                first = {"GPU": 1.0, "CPU": max(p.num_cpus, 1.0), **p.resources}
                bundles = [first] + [{"GPU": 1.0} for _ in range(int(p.gpus) - 1)]
                group = placement_group(bundles, strategy="STRICT_PACK",
                                        name=f"treeml-{name}-{os.getpid()}")
                self.groups[name] = group
            options.update(num_cpus=max(p.num_cpus, 1.0), num_gpus=0,
                           scheduling_strategy=PlacementGroupSchedulingStrategy(
                               placement_group=group, placement_group_bundle_index=0,
                               placement_group_capture_child_tasks=True))
        else:
            options.update(num_cpus=p.num_cpus, num_gpus=p.gpus, resources=dict(p.resources))
        # The pool keeps its spec as routed; its actor gets the spec's files from here.
        self.actors[name] = self.actor_class.options(**options).remote(
            located(self.spec, Path.cwd()), name, self.options)
        return name


def start_llm_actors(spec: str, replicas: int, options: dict[str, Any], *,
                     concurrency: int = 1, num_cpus: float = 1.0,
                     resources: dict[str, float] | None = None, gpus: float = 0.0) -> list[Any]:
    """LLM actors placed by Ray resources: CPUs here, or a custom `llm` slot on a cluster."""
    pool = LLMPool(spec, options, concurrency=concurrency,
                   placement=Placement(num_cpus, gpus, dict(resources or {})))
    return [actor for _, actor in pool.start(replicas)]


# The niceness of a spare executor's candidates: the lowest priority there is, so that the LLM
# whose CPU it shares, and the executors that hold theirs, lose little to it.
SPARE_NICE = 19


def start_executors(count: int, *, num_cpus: float = 1.0,
                    resources: dict[str, float] | None = None, gpus: float = 0.0,
                    names: list[str] | None = None, nice: int = 0) -> list[Any]:
    """One sandbox slot per actor, placed wherever Ray finds the resources."""
    return [
        ExecutorActor.options(num_cpus=num_cpus, num_gpus=gpus, resources=resources or {},
                              max_concurrency=1).remote(name, nice)
        for name in (names or [f"exec-{i}" for i in range(count)])
    ]


def start_spares(count: int, names: list[str] | None = None) -> list[Any]:
    """Spare executors: no CPU asked for (they run on an LLM's), candidates at SPARE_NICE."""
    return start_executors(count, num_cpus=0.0, nice=SPARE_NICE,
                           names=names or [f"exec-s{i}" for i in range(count)])


@dataclass(frozen=True)
class PoolPlan:
    """One LLM pool to start: its spec, backend options, shape and replica count."""

    spec: str
    options: dict[str, Any]
    concurrency: int
    placement: Placement
    replicas: int


class Workers:
    """Every actor of one start: an LLM pool per spec and the executors; restarts keep each
    replacement's placement the same as the actor it replaces."""

    def __init__(self, pools: list[LLMPool], executors: list[Any],
                 exec_placement: Placement) -> None:
        self.pools = pools
        self.executors = executors
        self.spares: list[Any] = []  # executors on the LLMs' CPUs, while an LLM may be asked
        self.exec_placement = exec_placement
        self._next = 0  # the executor run_script uses next
        self._pool_by_name = {name: pool for pool in pools for name in pool.actors}

    @classmethod
    def start(cls, plans: list[PoolPlan], executors: int,
              exec_placement: Placement = Placement(), *, spares: bool = False) -> Workers:
        """The pools and executors of `plans`; with `spares`, a spare executor on each plain
        CPU the LLM actors hold (`lendable_cpus`)."""
        pools = []
        for k, plan in enumerate(plans):
            # One spec keeps the names llm-0, llm-1, ...; mixed specs get llm<k>-0, ...
            pool = LLMPool(plan.spec, plan.options, concurrency=plan.concurrency,
                           placement=plan.placement,
                           prefix="llm" if len(plans) == 1 else f"llm{k}")
            pool.start(plan.replicas)
            pools.append(pool)
        p = exec_placement
        execs = start_executors(executors, num_cpus=p.num_cpus, resources=p.resources,
                                gpus=p.gpus)
        workers = cls(pools, execs, exec_placement)
        if spares:
            workers.spares = start_spares(workers.lendable_cpus())
            workers.executors += workers.spares
        return workers

    def models(self) -> list[str]:
        """The model name of each pool's first actor: waits for it to load, and turns a load
        failure into one line."""
        from common.errors import BackendError

        names = []
        for pool in self.pools:
            first = next(iter(pool.actors.values()))
            try:
                names.append(ray.get(first.model.remote()))
            except ray.exceptions.RayActorError as exc:
                cause = str(exc).strip().splitlines()[-1]
                raise BackendError(f"the LLM actor ({pool.spec}) failed to start: {cause}"
                                   ) from exc
        return names

    def loop_arguments(self) -> dict[str, Any]:
        """The SearchLoop's worker arguments: one slot per request an actor serves at once."""
        slots = [(pool.actors[name], name) for pool in self.pools for name in pool.actors
                 for _ in range(pool.concurrency)]
        pools = {name: pool.spec for pool in self.pools for name in pool.actors}
        return {"llm_slots": slots, "llm_pools": pools, "executors": list(self.executors),
                "restart_executor": self.restart_executor, "restart_llm": self.restart_llm,
                "lend_llm": self.lend_llm_cpus}

    def run_script(self, code: str, inputs: dict[str, bytes], limits: Limits) -> ExecResult:
        """Run one script on the executors, outside the search loop (the final selection's
        cross-validation folds): the same sandboxes as every candidate, never the driver."""
        (result,) = self.run_scripts([(code, inputs, limits)])
        return result

    def run_scripts(self, jobs: list[tuple[str, dict[str, bytes], Limits]]
                    ) -> list[ExecResult]:
        """Run scripts on every executor at once, each executor taking the next job in turn;
        the results in the jobs' order. A job whose executor died is run once more on its
        replacement."""
        placed = []
        for code, inputs, limits in jobs:
            index = self._next % len(self.executors)
            self._next += 1
            ref = ray.put(inputs)
            placed.append((index, ref, self.executors[index].run.remote(code, ref, limits)))
        results = []
        for (index, ref, future), (code, _, limits) in zip(placed, jobs, strict=True):
            try:
                results.append(ray.get(future).result)
            except ray.exceptions.RayActorError:
                fresh = self.restart_executor(self.executors[index])
                results.append(ray.get(fresh.run.remote(code, ref, limits)).result)
        return results

    def peak_candidate_bytes(self) -> int | None:
        """The most resident memory any candidate of this start held, over the executors that
        still answer (None: none did)."""
        peaks = []
        for executor in self.executors:
            with contextlib.suppress(Exception):  # dead, or gone with its node
                peaks.append(ray.get(executor.peak_candidate_bytes.remote(), timeout=10))
        return max(peaks, default=None)

    def lendable_cpus(self) -> int:
        """The executors the LLMs' CPUs would make once the search ends, beyond the spares
        already on them: those of LLM actors placed on plain CPUs (an actor on a GPU or a
        custom resource holds a node whose CPUs an executor may not be allowed, and waiting
        for it could hang the run's end)."""
        cpus = sum(pool.placement.num_cpus * len(pool.actors) for pool in self.pools
                   if not pool.placement.gpus and not pool.placement.resources)
        per_executor = self.exec_placement.num_cpus
        if self.exec_placement.gpus or self.exec_placement.resources or per_executor <= 0:
            return 0
        return max(0, int(cpus // per_executor) - len(self.spares))

    def lend_llm_cpus(self) -> list[Any]:
        """No LLM is asked again (the search ended, or its programs stopped paying): its
        actors go, and executors take the CPUs they held, so the answer's fits and the
        floor's trials run side by side: the spares run their next candidates as any other
        executor (the call waits behind a run in progress), and new executors take what
        CPUs are left (`lendable_cpus`). The new executors."""
        extra = self.lendable_cpus()
        for pool in self.pools:
            for actor in pool.actors.values():
                with contextlib.suppress(Exception):  # already dead
                    ray.kill(actor, no_restart=True)
            pool.actors.clear()
            pool.close()
        self.pools, self._pool_by_name = [], {}
        for spare in self.spares:
            spare.set_nice.remote(0)
        self.spares = []
        p = self.exec_placement
        lent = start_executors(extra, num_cpus=p.num_cpus, gpus=p.gpus,
                               names=[f"exec-c{i}" for i in range(extra)])
        self.executors += lent
        return lent

    def restart_executor(self, dead: Any) -> Any:
        """A replacement in the dead one's place (close then stops it too); a spare's is a
        spare."""
        p = self.exec_placement
        name = f"exec-r{os.urandom(2).hex()}"
        if any(spare is dead for spare in self.spares):
            (fresh,) = start_spares(1, names=[name])
            self.spares = [fresh if spare is dead else spare for spare in self.spares]
        else:
            (fresh,) = start_executors(1, num_cpus=p.num_cpus, resources=p.resources,
                                       gpus=p.gpus, names=[name])
        self.executors = [fresh if actor is dead else actor for actor in self.executors]
        if not any(actor is fresh for actor in self.executors):
            self.executors.append(fresh)
        return fresh

    def restart_llm(self, dead: Any, name: str) -> Any:
        """Same spec, options and placement; the loop bounds how often this happens."""
        return self._pool_by_name[name].restart(name)

    def close(self) -> None:
        """Every actor of this start goes, so a Ray session that outlives the run (see
        ray_session) keeps none of its CPUs or models."""
        actors = [*self.executors, *(a for pool in self.pools for a in pool.actors.values())]
        for actor in actors:
            with contextlib.suppress(Exception):  # already dead, or Ray shutting down
                ray.kill(actor, no_restart=True)
        for pool in self.pools:
            pool.actors.clear()
            pool.close()
        self.executors, self.spares = [], []
