"""Run a per-bundle function in worker processes: results in input order, memory bounded.

``engine_map(fn, items, engine, jobs=N)`` yields ``fn(item, engine)`` for each
item, in order, like ``map``. With ``jobs > 1`` the items go to ``N`` worker
processes in chunks, and only a few chunks per worker are in flight at any
time: the input is consumed lazily (a streamed discovery stays streamed) and
results are handed over as they arrive, so memory does not grow with the
number of bundles (``ProcessPoolExecutor.map`` submits every item up front and
keeps every result until it is consumed).

Where the platform forks (Linux) the workers are forked from the caller with
its engine and ``fn`` as they are (:class:`loop_core.forkpool.ForkPool`): the
pack is compiled once, in the parent, and a plugin registered on the
caller's plugin manager is seen by the workers too. Elsewhere a
``ProcessPoolExecutor`` runs the workers, and each builds its engine once,
from the pack's directory.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice
from typing import TYPE_CHECKING, Any, TypeVar

from .engine import Engine
from .errors import WorkerError

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["CHUNK", "WorkerError", "engine_map"]

T = TypeVar("T")
R = TypeVar("R")

CHUNK = 32  # items per task sent to a worker
WINDOW = 4  # chunks in flight per worker

_ENGINE: Engine | None = None


def engine_map(fn: Callable[[T, Engine], R], items: Iterable[T], engine: Engine, *, jobs: int = 1,
               rules: str | None = None, chunk: int = CHUNK, window: int = WINDOW) -> Iterator[R]:
    """``fn(item, engine)`` for every item, in order; in ``jobs`` processes when ``jobs > 1``.

    An exception ``fn`` raises in a worker is raised here, caused by the
    worker's traceback (:class:`loop_core.forkpool.WorkerTraceback` where
    workers are forked); a worker that dies raises :class:`WorkerError`.

    :param fn: a module-level function where workers are not forked (they
        receive it by reference); forked workers inherit any callable.
    :param rules: the pack a worker that cannot inherit ``engine`` builds when
        the engine's pack has no directory (``pack.root`` is None; a loaded
        pack always has one, which is used); ``default`` if not given.
    """
    source = iter(items)
    if jobs > 1:
        # Look ahead as far as the first round of chunks reaches: a short input is
        # spread over every worker (or, under two items per worker, not worth a pool).
        head = list(islice(source, jobs * window * chunk))
        if len(head) < jobs * window * chunk:
            chunk = max(1, -(-len(head) // (jobs * window)))
            if len(head) < 2 * jobs:
                jobs = 1
        source = chain(head, source)
    if jobs <= 1:
        for item in source:
            yield fn(item, engine)
        engine.pack.remember_literals()  # for the next start's literal scanner
        return
    if _forks():
        yield from _forked_map(fn, source, engine, jobs, chunk, window)
    else:
        root = engine.pack.root
        yield from _executor_map(fn, source, str(root) if root is not None else (rules or "default"),
                                 jobs, chunk, window)


def _forks() -> bool:
    """Whether workers are forked here: on Linux, where that is the safe, cheap choice."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def _forked_map(fn: Callable[[T, Engine], R], source: Iterator[T], engine: Engine, jobs: int,
                chunk: int, window: int) -> Iterator[R]:
    from .forkpool import ForkPool

    pool = ForkPool(fn, engine, jobs)
    finished = False
    try:
        yield from _in_order(source, chunk, jobs * window, pool.send, pool.receive)
        finished = True
    finally:
        # Also when the caller stops early or fails: then the workers are killed, not waited for.
        pool.close(kill=not finished)


def _in_order(source: Iterator[T], chunk: int, in_flight: int, send: Callable[[list[T]], Any],
              receive: Callable[[Any], list[R]]) -> Iterator[R]:
    """Send ``source`` in chunks, at most ``in_flight`` unanswered, and yield the
    answers in the order sent: ``send(chunk)`` returns what ``receive`` takes to
    wait for that chunk's answer."""
    pending: deque[Any] = deque()

    def submit() -> bool:
        batch = list(islice(source, chunk))
        if batch:
            pending.append(send(batch))
        return bool(batch)

    while len(pending) < in_flight and submit():
        pass
    while pending:
        results = receive(pending.popleft())
        submit()
        yield from results


# -- where workers are not forked -------------------------------------------


def _init(rules: str) -> None:
    global _ENGINE
    with contextlib.suppress(OSError):  # stdout is the parent's, for its rows: what a plugin prints goes to stderr
        os.dup2(2, 1)
    _ENGINE = Engine.build(rules)


def _run_chunk(fn: Callable[[Any, Engine], Any], chunk: list[Any]) -> list[Any]:
    assert _ENGINE is not None, "worker engine not initialised"
    engine = _ENGINE
    try:
        return [fn(item, engine) for item in chunk]
    except SystemExit as e:  # the pool would raise it in the caller, which then ended quietly
        raise WorkerError(f"worker process {os.getpid()}: sys.exit({e.code!r}) was called while classifying") from e


def _answer(future: Future[list[R]]) -> list[R]:
    """A chunk's answer; a worker that died (killed, out of memory) or could not start
    is a :class:`WorkerError`, as where workers are forked, not the pool's own error."""
    with _broken_pool():
        return future.result()


@contextlib.contextmanager
def _broken_pool() -> Iterator[None]:
    """The pool's BrokenProcessPool as a :class:`WorkerError`: raised by a chunk's answer,
    or by the next chunk's submit when the pool broke first."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        yield
    except BrokenProcessPool as e:
        raise WorkerError(f"a worker process ended before answering, or could not start "
                          f"(killed, out of memory?): {e}") from e


def _submitter(pool: Any, fn: Callable[[Any, Engine], Any]) -> Callable[[list[Any]], Any]:
    def send(batch: list[Any]) -> Any:
        with _broken_pool():
            return pool.submit(_run_chunk, fn, batch)
    return send


def _executor_map(fn: Callable[[T, Engine], R], source: Iterator[T], rules: str, jobs: int,
                  chunk: int, window: int) -> Iterator[R]:
    """The same as :func:`_forked_map`, where workers are started afresh: each builds
    the engine from ``rules`` and gets ``fn`` by reference."""
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_init, initargs=(rules,))
    try:
        yield from _in_order(source, chunk, jobs * window, _submitter(pool, fn), _answer)
    finally:
        # An abandoned iteration (an error in the caller, a closed generator) stops the pool.
        pool.shutdown(wait=True, cancel_futures=True)
