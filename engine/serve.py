"""Command line: `python -m engine.serve runs/<id> [--port 8080] [--host 127.0.0.1] [--sessions N]`.

The run's answer as an HTTP service (Starlette's routes, served by uvicorn: the `serve` extra):

- `GET /health`: the run id, task type, target, metric, the feature columns with their kind
  (`number` or `text`), whether `/predict` gives class probabilities, and the session count.
- `POST /predict`: a JSON list of row objects, or `{"rows": [...]}`; each row holds every
  feature column (a target column is ignored). The reply is `{"predictions": [...]}`, plus
  `"probabilities": [{class: p, ...}, ...]` where the answer gives them (classification under a
  metric that scores probabilities: roc_auc, log_loss).

Behind the routes sit `--sessions` copies of the answer (engine.predict's `Answer`), each with
its own sandbox session: the answer's code and the pickles its search wrote are loaded only
there, never in this process. A request takes a free copy or waits, in arrival order, for one
to come free, so with the default one session concurrent requests are served one at a time.
Every session is started, with one training row, before the port opens: a run whose answer
cannot predict ends the command there.

A request the service cannot serve as sent gets a 4xx and a one-line JSON `{"error": ...}`, and
the service stays up: malformed JSON, a body nested too deeply to parse, a body that is not rows,
0 rows, a row missing a feature column or holding an unknown one, text or a nested value where
the training data had numbers (JSON numbers or null only), a number that is not finite (`NaN`,
`Infinity`, `1e400`), a body over `--max-body-mb` (413). The answer failing on valid rows
is a 500 with its one line; its session is started again by the next request.

Ctrl-C (or SIGTERM) stops the service, also one started with SIGINT ignored (a script's `&`
job): requests in flight get up to `_GRACE_SECONDS`, then every session is closed and the
command exits 0. A bad run path or a run with no answer is one line and exit code 2 or 1, as
engine.predict.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import queue
import signal
import socket
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from common.errors import EngineError, UserError, error_exit
from engine.evaluation.scoring import class_probabilities
from engine.predict import Answer
from engine.task.prepare import PreparedTask

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"  # this machine only: the service has no authentication
DEFAULT_MAX_BODY_MB = 10.0
_GRACE_SECONDS = 5  # for requests in flight at Ctrl-C; a 10,000-row call takes seconds today
_SHOW = 5  # how many column names an error quotes before "..."


class RequestError(Exception):
    """A request the service cannot serve as sent: its HTTP status and one line saying why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine.serve",
        description="Serve a run's answer over HTTP: GET /health, POST /predict (JSON rows).",
    )
    parser.add_argument("run", type=Path, help="the run directory, runs/<run_id>")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"TCP port; 0 picks a free one (default: {DEFAULT_PORT})")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default: {DEFAULT_HOST}, this machine "
                             "only; 0.0.0.0 for every interface)")
    parser.add_argument("--sessions", type=int, default=1,
                        help="sandbox sessions serving requests side by side; a request waits "
                             "for a free one (default: 1)")
    parser.add_argument("--max-body-mb", type=float, default=DEFAULT_MAX_BODY_MB,
                        help="largest request body in MB; a larger one gets 413 (default: "
                             f"{DEFAULT_MAX_BODY_MB:g})")
    return parser


def _names(columns: list[str]) -> str:
    shown = ", ".join(map(repr, columns[:_SHOW]))
    return shown + (f" and {len(columns) - _SHOW} more" if len(columns) > _SHOW else "")


def feature_kinds(task: PreparedTask) -> dict[str, str]:
    """Each training feature, in training order: `number` where the training data had numbers
    (a request must send a JSON number or null there), else `text`."""
    return {str(c): "number" if pd.api.types.is_numeric_dtype(kind) else "text"
            for c, kind in task.train.dtypes.items() if c != task.target}


def _integer(text: str) -> int | float:
    """A JSON integer: an int where int64 holds it, else a float (inf past float64's range, then
    refused as not finite). A larger int made pandas' column object or uint64 (predicted
    otherwise than the same value beside a float row), and one past float64 a plain-text 500."""
    if len(text) <= 18:
        return int(text)
    number = float(text)  # never int(text) first: over 4,300 digits that raises
    return int(text) if abs(number) < 2**63 else number


def request_rows(body: bytes, task: PreparedTask) -> pd.DataFrame:
    """The rows of a /predict body as a frame of the training features, in training order; a
    RequestError naming the first thing wrong (the row's index too)."""
    try:
        payload = json.loads(body, parse_int=_integer)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise RequestError(f"the body is not JSON: {exc}") from exc
    except RecursionError as exc:  # the parser recurses per level: 50,000 '[' ran it out
        raise RequestError("the body is nested too deeply to read; send a JSON list of row "
                           "objects") from exc
    rows = payload.get("rows") if isinstance(payload, dict) and set(payload) == {"rows"} \
        else payload
    if not isinstance(rows, list):
        raise RequestError('send a JSON list of row objects, or {"rows": [...]}')
    if not rows:
        raise RequestError("no rows: send at least one row to predict")
    kinds = feature_kinds(task)
    bools = {str(c) for c, kind in task.train.dtypes.items() if pd.api.types.is_bool_dtype(kind)}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise RequestError(f"row {i} is not an object of column: value")
        missing = [c for c in kinds if c not in row]
        unknown = [c for c in row if c not in kinds and c != task.target]
        if missing or unknown:
            parts = [f"{what} column{'s' * (len(columns) > 1)} {_names(columns)}"
                     for what, columns in (("missing", missing), ("unknown", unknown)) if columns]
            raise RequestError(f"row {i}: {'; '.join(parts)} (the features: "
                               f"{_names(list(kinds))}; GET /health lists them all)")
        for column, kind in kinds.items():
            value = row[column]
            if isinstance(value, list | dict):
                raise RequestError(f"row {i}, column {column!r}: a nested value; send a number "
                                   "or a string")
            is_number = isinstance(value, int | float) and (not isinstance(value, bool)
                                                            or column in bools)
            if isinstance(value, float) and not math.isfinite(value):
                raise RequestError(f"row {i}, column {column!r}: {value!r} is not a finite "
                                   "number (NaN, or past float64's 1.8e308); send a finite "
                                   "number (null for missing)")
            if kind == "number" and value is not None and not is_number:
                raise RequestError(f"row {i}, column {column!r}: {json.dumps(value)[:50]} where "
                                   "the training data had numbers; send a number (null for "
                                   "missing)")
    return pd.DataFrame.from_records(rows, columns=list(kinds))


class Sessions:
    """`count` copies of the run's answer, each serving from its own sandbox session. A call
    takes a free copy or waits for one (queue.Queue wakes waiters first come, first served)."""

    def __init__(self, run: Path, count: int) -> None:
        self.answers: list[Answer] = []
        self._free: queue.Queue[Answer] = queue.Queue()
        try:
            for _ in range(count):
                answer = Answer(run)
                self.answers.append(answer)
                # Start its session now: the first request should not pay for it, and an
                # answer that cannot predict should stop the command, not fail every request.
                first = _frame(answer, answer.task.train.head(1), "the training rows")
                self._free.put(answer)
        except BaseException:
            self.close()
            raise
        self.task = self.answers[0].task
        self.probabilities = not class_probabilities(first).columns.empty
        self.trains_again = self.answers[0].states is None  # no saved model: slow, but right

    def predict(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The answer's prediction frame of `rows`: `prediction`, and probability columns
        where the answer gives them."""
        answer = self._free.get()
        try:
            return _frame(answer, rows, "the request")
        finally:
            self._free.put(answer)

    def close(self) -> None:
        """Close every session, also one a request still holds (that request then fails)."""
        for answer in self.answers:
            answer.close()


def _frame(answer: Answer, rows: pd.DataFrame, source: str) -> pd.DataFrame:
    predictions, _, _ = answer.predict(rows, source)
    return pd.read_csv(io.BytesIO(predictions))


def _plain(values: Iterable[Any]) -> list[Any]:
    """JSON has no NaN: a missing value is null."""
    return [None if isinstance(v, float) and v != v else v for v in values]


def reply(frame: pd.DataFrame) -> dict[str, Any]:
    """The /predict reply of a prediction frame."""
    out: dict[str, Any] = {"predictions": _plain(frame["prediction"].tolist())}
    proba = class_probabilities(frame)
    if not proba.columns.empty:
        out["probabilities"] = [dict(zip(proba.columns, _plain(row), strict=True))
                                for row in proba.itertuples(index=False, name=None)]
    return out


def build_app(sessions: Sessions, run_id: str, max_body_bytes: int) -> Starlette:
    """The routes over `sessions` (module docstring)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    task = sessions.task
    health_body = {
        "run_id": run_id, "task_type": task.task_type, "target": task.target,
        "metric": task.metric.name,
        "features": [{"name": n, "type": k} for n, k in feature_kinds(task).items()],
        "probabilities": sessions.probabilities,
        "sessions": len(sessions.answers),
    }

    async def health(request: Request) -> Response:
        return JSONResponse(health_body)

    async def read_body(request: Request) -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            # Past the cap the rest is read and dropped: a client that sends its whole body
            # before reading the reply (urllib, requests) would otherwise see the connection
            # reset, not the 413.
            if size <= max_body_bytes:
                chunks.append(chunk)
        if size > max_body_bytes:
            raise RequestError(f"the body is over {max_body_bytes / 1e6:g} MB (--max-body-mb); "
                               "send fewer rows per request", 413)
        return b"".join(chunks)

    async def predict(request: Request) -> Response:
        try:
            # In a worker thread, as the prediction: 10,000 rows are checked one by one
            rows = await run_in_threadpool(request_rows, await read_body(request), task)
        except RequestError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        try:
            frame = await run_in_threadpool(sessions.predict, rows)
        except UserError as exc:  # a check of engine.predict's that request_rows let through
            return JSONResponse({"error": str(exc)}, status_code=400)
        except EngineError as exc:
            return JSONResponse({"error": str(exc)}, status_code=500)
        return JSONResponse(reply(frame))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    return Starlette(routes=[Route("/health", health, methods=["GET"]),
                             Route("/predict", predict, methods=["POST"])],
                     exception_handlers={HTTPException: http_error})


def _uvicorn() -> Any:
    """uvicorn, once the serve extra is known to be installed (build_app imports Starlette)."""
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise UserError(f"the service needs the serve extra ({exc.name} is missing): "
                        "pip install -e '.[serve]'") from exc
    return uvicorn


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket, bound here so that a taken port is one line, and port 0 a free one."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not left 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets
    # whose proto says TCP, and accepted sockets copy the listener's. With Nagle on, a
    # reply's body waited for the client's delayed ACK of its headers: 40 ms a request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(128)
    return sock


def serve(run: Path, host: str, port: int, sessions_count: int, max_body_mb: float) -> None:
    """Serve `run`'s answer until Ctrl-C or SIGTERM (both raise KeyboardInterrupt here); every
    session is closed on the way out. Call it from the main thread: it sets a signal handler."""
    uvicorn = _uvicorn()
    sock = _listen(host, port)
    # SIGINT as Python's own even where it came in ignored (a script's `&` job, and so every
    # child of a test run started that way): uvicorn takes it once serving, but one landing
    # between the "serving" line and uvicorn's handlers was dropped and the service ran on.
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _interrupt),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    try:
        print(f"starting {sessions_count} sandbox session{'s' * (sessions_count > 1)} for the "
              f"answer of {run.name} ...", flush=True)
        sessions = Sessions(run, sessions_count)  # Ctrl-C here: main's "stopped before"
        try:
            app = build_app(sessions, run.name, int(max_body_mb * 1e6))
            config = uvicorn.Config(app, log_level="warning",
                                    timeout_graceful_shutdown=_GRACE_SECONDS)
            if sessions.trains_again:
                print(f"{run.name} kept no model of its answer: every request trains it "
                      "again (engine.predict does the same)", flush=True)
            bound_host, bound_port = sock.getsockname()[:2]
            # A Ctrl-C from the announcement on is a normal stop, even one that lands before
            # uvicorn's handlers are in: the announcement is inside the suppressed block.
            # uvicorn stops gracefully on the signal, then raises it again once it is done.
            with contextlib.suppress(KeyboardInterrupt):
                print(f"serving the answer of {run.name} on http://{bound_host}:{bound_port} "
                      "(GET /health, POST /predict); Ctrl-C stops", flush=True)
                uvicorn.Server(config).run(sockets=[sock])
        finally:
            # Ignored while the sessions close: the stopping signal raised again late, or a
            # second Ctrl-C, must not leave a sandbox running.
            interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                sessions.close()
            finally:
                signal.signal(signal.SIGINT, interrupt)
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: set outside Python, cannot be put back
                signal.signal(signum, handler)
        sock.close()
    print("stopped; the sandbox sessions are closed", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.sessions < 1:
            raise UserError(f"--sessions must be at least 1, got {args.sessions}")
        if args.max_body_mb <= 0:
            raise UserError(f"--max-body-mb must be positive, got {args.max_body_mb:g}")
        if not 0 <= args.port <= 65535:
            raise UserError(f"--port must be 0 to 65535, got {args.port}")
        serve(args.run, args.host, args.port, args.sessions, args.max_body_mb)
    except EngineError as exc:
        return error_exit(exc)
    except KeyboardInterrupt:  # while the sessions started, before the port was served
        print("stopped before serving; the sandbox sessions are closed", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
