"""Worker processes forked from the caller, fed over pipes (Linux ``--jobs``).

:class:`ForkPool` forks ``N`` workers that inherit the caller's engine and
function as they are. Each reads pickled chunks from a pipe of its own and
answers each, in the order given, on another; the parent reads the answers
back in the turn it sent the chunks. There is no management thread and no
shared queue, and nothing to import beyond ``pickle`` and ``select``:
``concurrent.futures`` and ``multiprocessing`` cost a start about 50 million
instructions (some 15 ms) before the first worker could begin.
:func:`loop_core.parallel.engine_map` decides when to use it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from .errors import WorkerError

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["ForkPool", "WorkerTraceback"]

# The parent's ends of every live worker's pipes, in every pool of this process: a
# worker forked later must close them all, or a worker of another pool never sees
# the end of its input while this one lives (two pools open at once would hang).
_PARENT_ENDS: set[int] = set()
# Held back while a worker is forked (see ForkPool._fork).
_STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


class ForkPool:
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
        self._workers: list[_Worker] = []
        self._turn = 0  # the worker the next chunk goes to
        try:
            for _ in range(jobs):
                self._fork(fn, engine)
        except BaseException:
            self.close()
            raise

    def _fork(self, fn: Callable[[Any, Engine], Any], engine: Engine) -> None:
        """Start one worker and add it to the pool.

        Ctrl-C and SIGTERM are held back while it forks: one that landed in the
        interpreter's own after-fork hooks was printed as "Exception ignored"
        and dropped, and the run went on to its end. Held back, it is raised
        once the worker is in the pool, which closing the pool then stops.
        """
        opened: list[int] = []
        for stream in (sys.stdout, sys.stderr):  # or the child would write the parent's buffer again
            if stream is not None:
                stream.flush()
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            try:
                tasks_in, tasks_out = os.pipe()
                opened += (tasks_in, tasks_out)
                answers_in, answers_out = os.pipe()
                opened += (answers_in, answers_out)
                pid = os.fork()
            except OSError as e:  # no more processes or descriptors: nothing of this worker may stay open
                for fd in opened:
                    os.close(fd)
                raise WorkerError(f"could not start a worker process: {e.strerror or e}") from e
            if pid == 0:  # the worker: it never returns from here
                os.close(tasks_out)
                os.close(answers_in)
                for fd in _PARENT_ENDS:  # the pipes of workers forked before this one, of any pool
                    os.close(fd)
                _serve(fn, engine, tasks_in, answers_out, previous)
            os.close(tasks_in)
            os.close(answers_out)
            _PARENT_ENDS.update((tasks_out, answers_in))
            os.set_blocking(tasks_out, False)
            os.set_blocking(answers_in, False)
            self._workers.append(_Worker(pid, tasks_out, answers_in))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def send(self, chunk: list[Any]) -> int:
        """Send ``chunk`` to the next worker in turn; its number, to :meth:`receive` by."""
        index = self._turn
        self._turn = (index + 1) % len(self._workers)
        worker = self._workers[index]
        worker.outbox += pickle.dumps(chunk, protocol=5)  # a pickle needs no frame: it ends itself
        self._write(worker)
        return index

    def receive(self, index: int) -> list[Any]:
        """The answer to the oldest chunk sent to worker ``index`` (what waits in
        the outboxes is written meanwhile); raises what the worker's ``fn`` raised."""
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
        try:
            ok, value = pickle.loads(payload)
        except Exception as e:  # any unpickling error: named for what it is, not in pickle's words
            raise RuntimeError(f"worker process {worker.pid} answered with something that cannot be read "
                               f"back here ({type(e).__name__}: {e}); a plugin's result that does not "
                               f"unpickle?") from e
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
        for worker in self._workers:
            _PARENT_ENDS.difference_update((worker.tasks, worker.answers))
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
           mask: set[int | signal.Signals]) -> NoReturn:
    """A forked worker's life: answer each chunk read from ``tasks`` on ``answers``
    until the parent closes its end; then write out what ``fn`` printed and leave
    with ``os._exit``, which runs none of the parent's exit handlers. ``mask``: the
    signal mask to go back to (the fork held Ctrl-C and SIGTERM back)."""
    # Ctrl-C and a polite SIGTERM to the group are the parent's to handle: it closes the pipes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    # stdout is the parent's, for its rows: what fn prints there would land inside one
    # (a worker's write is not a whole line). It goes to stderr instead.
    with contextlib.suppress(OSError):  # no stderr to send it to: stdout, as before
        os.dup2(2, 1)
    status = 0
    try:
        with open(tasks, "rb") as inbox, open(answers, "wb") as outbox:
            while True:
                try:
                    chunk = pickle.load(inbox)
                except EOFError:
                    break
                try:
                    message = pickle.dumps((True, [fn(item, engine) for item in chunk]), protocol=5)
                except Exception as e:  # noqa: BLE001 - handed to the caller, who raises it
                    message = _error_message(e, traceback.format_exc())
                except SystemExit as e:  # code that called sys.exit (a plugin's): said, not a silent death
                    message = _error_message(WorkerError(
                        f"worker process {os.getpid()}: sys.exit({e.code!r}) was called while classifying"),
                        traceback.format_exc())
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


def _error_message(error: Exception, trace: str) -> bytes:
    """The answer that carries ``error`` to the parent: the exception itself when it
    survives pickling both ways (an exception class whose ``__init__`` takes other
    arguments than it stores pickles but does not unpickle), else its text."""
    try:
        message = pickle.dumps((False, (error, trace)), protocol=5)
        pickle.loads(message)
        return message
    except Exception:  # noqa: BLE001 - it travels as its text instead
        return pickle.dumps((False, (RuntimeError(f"{type(error).__name__}: {error}"), trace)), protocol=5)
