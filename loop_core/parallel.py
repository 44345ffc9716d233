"""Run a per-bundle function in worker processes: results in input order, memory bounded.

``engine_map(fn, items, engine, jobs=N)`` yields ``fn(item, engine)`` for each
item, in order, like ``map``. With ``jobs > 1`` the items go to ``N`` worker
processes in chunks, and only a few chunks per worker are in flight at any
time: the input is consumed lazily (a streamed discovery stays streamed) and
results are handed over as they arrive, so memory does not grow with the
number of bundles (``ProcessPoolExecutor.map`` submits every item up front and
keeps every result until it is consumed).

Where the platform forks (Linux) the workers are forked from the caller with
its engine and ``fn`` as they are: the pack is compiled once, in the parent,
and a plugin registered on the caller's plugin manager is seen by the workers
too. Each worker reads its chunks from a pipe of its own and writes the
answers back, in order, on another (:class:`_ForkPool`): no management thread,
no shared queue, and nothing imported for it beyond ``pickle`` and ``select``
(importing ``concurrent.futures`` and ``multiprocessing`` costs about 70
million instructions, some 20 ms, before the first worker starts).
Elsewhere a ``ProcessPoolExecutor`` runs the workers, and each builds its
engine once, from the pack's directory.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from .engine import Engine
from .errors import WorkerError

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["CHUNK", "WorkerError", "WorkerTraceback", "engine_map"]

T = TypeVar("T")
R = TypeVar("R")

CHUNK = 32  # items per task sent to a worker
WINDOW = 4  # chunks in flight per worker

_ENGINE: Engine | None = None


def engine_map(fn: Callable[[T, Engine], R], items: Iterable[T], engine: Engine, *, jobs: int = 1,
               rules: str | None = None, chunk: int = CHUNK, window: int = WINDOW) -> Iterator[R]:
    """``fn(item, engine)`` for every item, in order; in ``jobs`` processes when ``jobs > 1``.

    An exception ``fn`` raises in a worker is raised here, caused by the
    worker's traceback; a worker that dies raises :class:`WorkerError`.

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
    pool = _ForkPool(fn, engine, jobs)
    order: deque[int] = deque()  # the worker of each chunk in flight, oldest first
    sent = 0
    finished = False
    try:
        def submit() -> bool:
            nonlocal sent
            batch = list(islice(source, chunk))
            if batch:
                worker = sent % jobs
                pool.send(worker, batch)
                order.append(worker)
                sent += 1
            return bool(batch)

        while len(order) < jobs * window and submit():
            pass
        while order:
            results = pool.receive(order.popleft())
            submit()
            yield from results
        finished = True
    finally:
        # Also when the caller stops early or fails: then the workers are killed, not waited for.
        pool.close(kill=not finished)


class _ForkPool:
    """``jobs`` workers forked from this process, each sent chunks over a pipe of
    its own and answering them, in the order sent, over another.

    Chunks go round the workers in turn and answers are read back in the same
    turn, so each worker's answers arrive in the order the caller wants them.
    The parent never blocks on a write: what does not fit in a worker's pipe
    waits in that worker's outbox and is written while the parent waits for an
    answer. (A parent blocked writing a chunk to a worker that is itself
    blocked writing a long answer nobody reads would wait forever.)
    """

    def __init__(self, fn: Callable[[Any, Engine], Any], engine: Engine, jobs: int) -> None:
        import pickle

        self._dumps, self._loads = pickle.dumps, pickle.loads
        self._workers: list[_Worker] = []
        try:
            for _ in range(jobs):
                self._workers.append(self._fork(fn, engine))
        except BaseException:
            self.close()
            raise

    def _fork(self, fn: Callable[[Any, Engine], Any], engine: Engine) -> _Worker:
        tasks_in, tasks_out = os.pipe()
        answers_in, answers_out = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # or the child would write the parent's buffer again
            if stream is not None:
                stream.flush()
        try:
            pid = os.fork()
        except OSError:  # no more processes: nothing of this worker may stay open
            for fd in (tasks_in, tasks_out, answers_in, answers_out):
                os.close(fd)
            raise
        if pid == 0:  # the worker: it never returns from here
            os.close(tasks_out)
            os.close(answers_in)
            for other in self._workers:  # the pipes of workers forked before this one
                os.close(other.tasks)
                os.close(other.answers)
            _serve(fn, engine, tasks_in, answers_out, self._dumps)
        os.close(tasks_in)
        os.close(answers_out)
        os.set_blocking(tasks_out, False)
        os.set_blocking(answers_in, False)
        return _Worker(pid, tasks_out, answers_in)

    def send(self, index: int, chunk: list[Any]) -> None:
        worker = self._workers[index]
        worker.outbox += self._dumps(chunk, protocol=5)  # a pickle needs no frame: it ends itself
        self._write(worker)

    def receive(self, index: int) -> list[Any]:
        """The answer to the oldest chunk sent to worker ``index``, written out
        chunks permitting; raises what the worker's ``fn`` raised."""
        import select

        worker = self._workers[index]
        while (payload := worker.answer()) is None:
            poll = select.poll()
            poll.register(worker.answers, select.POLLIN)
            waiting = {w.tasks: w for w in self._workers if w.outbox}
            for fd in waiting:
                poll.register(fd, select.POLLOUT)
            for fd, _events in poll.poll():
                if fd == worker.answers:
                    if not worker.read():
                        raise self._death(worker)
                else:
                    self._write(waiting[fd])
        ok, value = self._loads(payload)
        if ok:
            return value  # type: ignore[no-any-return]
        error, trace = value
        raise error from WorkerTraceback(f"in worker process {worker.pid}:\n{trace}".rstrip())

    @staticmethod
    def _write(worker: _Worker) -> None:
        try:
            written = os.write(worker.tasks, worker.outbox)
        except BlockingIOError:
            return
        except BrokenPipeError:  # the worker is gone; reading its answers will say how
            worker.outbox.clear()
            return
        del worker.outbox[:written]

    @staticmethod
    def _death(worker: _Worker) -> WorkerError:
        import signal

        pid, status = os.waitpid(worker.pid, 0)
        worker.pid = 0
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            how = f"was killed by signal {number}" + (" (out of memory?)" if number == signal.SIGKILL else "")
        else:
            how = f"exited with status {os.waitstatus_to_exitcode(status)}"
        return WorkerError(f"worker process {pid} {how} before answering")

    def close(self, kill: bool = False) -> None:
        """Stop the workers and reap them: each reads the end of its input as the
        last chunk; with ``kill`` (answers no longer wanted) they are ended at once."""
        import signal

        for worker in self._workers:
            os.close(worker.tasks)
            os.close(worker.answers)  # a worker still writing an answer gets EPIPE and ends
            if kill and worker.pid:
                os.kill(worker.pid, signal.SIGKILL)
        for worker in self._workers:
            if worker.pid:
                os.waitpid(worker.pid, 0)
        self._workers = []


class WorkerTraceback(Exception):
    """The traceback of an exception raised in a worker, as its cause in the caller."""


class _Worker:
    """The parent's side of one worker: its pipes, chunks not yet written, an answer being read."""

    __slots__ = ("answers", "inbox", "outbox", "pid", "tasks")

    def __init__(self, pid: int, tasks: int, answers: int) -> None:
        self.pid = pid
        self.tasks = tasks
        self.answers = answers
        self.outbox = bytearray()
        self.inbox = bytearray()

    def read(self) -> bool:
        """Read what the answer pipe holds; False at its end (the worker is gone)."""
        try:
            data = os.read(self.answers, 1 << 20)
        except BlockingIOError:
            return True
        self.inbox += data
        return bool(data)

    def answer(self) -> bytes | None:
        """The next whole answer read, taken from the inbox; None before it is all in."""
        if len(self.inbox) < _HEADER_SIZE:
            return None
        end = _HEADER_SIZE + int.from_bytes(self.inbox[:_HEADER_SIZE], "little")
        if len(self.inbox) < end:
            return None
        payload = bytes(self.inbox[_HEADER_SIZE:end])
        del self.inbox[:end]
        return payload


_HEADER_SIZE = 8  # each message: its length, 8 bytes little-endian, then the pickle


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(_HEADER_SIZE, "little") + payload


def _serve(fn: Callable[[Any, Engine], Any], engine: Engine, tasks: int, answers: int,
           dumps: Callable[..., bytes]) -> NoReturn:
    """A forked worker's life: answer each chunk read from ``tasks`` on ``answers``
    until the parent closes its end; then write out what ``fn`` printed and leave
    with ``os._exit``, which runs none of the parent's exit handlers."""
    import pickle
    import signal
    import traceback

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it closes the pipes
    status = 0
    try:
        with open(tasks, "rb") as inbox, open(answers, "wb") as outbox:
            while True:
                try:
                    chunk = pickle.load(inbox)
                except EOFError:
                    break
                try:
                    message = dumps((True, [fn(item, engine) for item in chunk]), protocol=5)
                except Exception as e:  # noqa: BLE001 - handed to the caller, who raises it
                    message = _error_message(e, traceback.format_exc(), dumps)
                outbox.write(_frame(message))
                outbox.flush()
    except BrokenPipeError:
        pass  # the parent stopped reading: it is done with us
    except BaseException:  # noqa: BLE001 - nothing to report to: the parent sees the pipe end
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):  # what fn printed; the parent flushed its own before the fork
            try:
                if stream is not None:
                    stream.flush()
            except Exception:  # noqa: BLE001, S110 - leaving anyway
                pass
        os._exit(status)


def _error_message(error: Exception, trace: str, dumps: Callable[..., bytes]) -> bytes:
    try:
        return dumps((False, (error, trace)), protocol=5)
    except Exception:  # noqa: BLE001 - an exception that does not pickle travels as its text
        return dumps((False, (RuntimeError(f"{type(error).__name__}: {error}"), trace)), protocol=5)


# -- where workers are not forked -------------------------------------------


def _init(rules: str) -> None:
    global _ENGINE
    _ENGINE = Engine.build(rules)


def _run_chunk(fn: Callable[[Any, Engine], Any], chunk: list[Any]) -> list[Any]:
    assert _ENGINE is not None, "worker engine not initialised"
    engine = _ENGINE
    return [fn(item, engine) for item in chunk]


def _executor_map(fn: Callable[[T, Engine], R], source: Iterator[T], rules: str, jobs: int,
                  chunk: int, window: int) -> Iterator[R]:
    """The same as :func:`_forked_map`, where workers are started afresh: each builds
    the engine from ``rules`` and gets ``fn`` by reference."""
    from concurrent.futures import ProcessPoolExecutor

    pending: deque[Future[list[R]]] = deque()
    pool = ProcessPoolExecutor(max_workers=jobs, initializer=_init, initargs=(rules,))
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
