"""Run a per-bundle function in worker processes: results in input order, memory bounded.

``engine_map(fn, items, engine, jobs=N)`` yields ``fn(item, engine)`` for each
item, in order, like ``map``. With ``jobs > 1`` the items go to ``N`` worker
processes in chunks, and only a few chunks per worker are in flight at any
time: the input is consumed lazily (a streamed discovery stays streamed) and
results are handed over as they arrive, so memory does not grow with the
number of bundles (``ProcessPoolExecutor.map`` submits every item up front and
keeps every result until it is consumed).

Workers get the caller's engine itself where the platform forks (Linux): the
pack is compiled once, in the parent, and a plugin registered on the
caller's plugin manager is seen by the workers too. Elsewhere each worker
builds its engine once, from the pack's directory.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice
from typing import TYPE_CHECKING, Any, TypeVar

from .engine import Engine

if TYPE_CHECKING:
    from concurrent.futures import Future

# multiprocessing and concurrent.futures are imported only when a pool is started:
# a single-process run (and a one-bundle command) does not pay for them.

__all__ = ["CHUNK", "engine_map"]

T = TypeVar("T")
R = TypeVar("R")

CHUNK = 32  # items per task sent to a worker
WINDOW = 4  # chunks in flight per worker

_ENGINE: Engine | None = None


def _mp_context() -> Any:
    """Fork where it is the safe, cheap choice (Linux); the platform default elsewhere."""
    import multiprocessing

    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _init(engine: Engine | None, rules: str) -> None:
    global _ENGINE
    _ENGINE = engine if engine is not None else Engine.build(rules)


def _run_chunk(fn: Callable[[Any, Engine], Any], chunk: list[Any]) -> list[Any]:
    assert _ENGINE is not None, "worker engine not initialised"
    engine = _ENGINE
    return [fn(item, engine) for item in chunk]


def engine_map(fn: Callable[[T, Engine], R], items: Iterable[T], engine: Engine, *, jobs: int = 1,
               rules: str | None = None, chunk: int = CHUNK, window: int = WINDOW) -> Iterator[R]:
    """``fn(item, engine)`` for every item, in order; in ``jobs`` processes when ``jobs > 1``.

    :param fn: a module-level function (workers receive it by reference).
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
    from concurrent.futures import ProcessPoolExecutor

    context = _mp_context()
    if context.get_start_method() == "fork":
        initargs: tuple[Any, ...] = (engine, "")
    else:  # the engine is not picklable: rebuild it in each worker
        root = engine.pack.root
        initargs = (None, str(root) if root is not None else (rules or "default"))
    pending: deque[Future[list[R]]] = deque()
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_init, initargs=initargs)
    try:
        def submit() -> bool:
            batch = list(islice(source, chunk))
            if batch:
                pending.append(pool.submit(_run_chunk, fn, batch))
            return bool(batch)

        while len(pending) < jobs * window and submit():
            pass
        while pending:
            results = pending.popleft().result()
            submit()
            yield from results
    finally:
        # An abandoned iteration (an error in the caller, a closed generator) stops the pool.
        pool.shutdown(wait=True, cancel_futures=True)
