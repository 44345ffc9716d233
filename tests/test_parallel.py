"""engine_map: worker processes, results in input order, input consumed lazily. No timings."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from loop_core import Engine
from loop_core.parallel import engine_map


def _tag(item: int, engine: Engine) -> tuple[int, int, str]:
    return item, os.getpid(), engine.pack.version


def _slow_tag(item: int, engine: Engine) -> tuple[int, int, str]:
    time.sleep(0.01)  # long enough for the second worker to be running before the work is gone
    return _tag(item, engine)


def _boom(item: int, engine: Engine) -> int:
    if item == 7:
        raise ValueError("item 7")
    return item


def test_results_come_back_in_input_order_from_several_processes(engine: Engine) -> None:
    out = list(engine_map(_slow_tag, range(60), engine, jobs=2, chunk=3, window=2))
    assert [item for item, _pid, _v in out] == list(range(60))
    pids = {pid for _item, pid, _v in out}
    assert os.getpid() not in pids and len(pids) == 2  # both workers did some
    assert {v for *_rest, v in out} == {engine.pack.version}  # the caller's pack


def test_one_process_when_asked_or_when_the_input_is_tiny(engine: Engine) -> None:
    assert {pid for _i, pid, _v in engine_map(_tag, range(50), engine, jobs=1)} == {os.getpid()}
    assert {pid for _i, pid, _v in engine_map(_tag, range(3), engine, jobs=2)} == {os.getpid()}
    assert list(engine_map(_tag, [], engine, jobs=2)) == []


def test_a_short_input_is_spread_over_the_workers(engine: Engine) -> None:
    out = list(engine_map(_slow_tag, range(8), engine, jobs=2))  # under one default chunk
    assert [i for i, _p, _v in out] == list(range(8))
    assert len({pid for _i, pid, _v in out}) == 2


def test_the_input_is_consumed_lazily(engine: Engine) -> None:
    pulled = 0

    def items() -> Iterator[int]:
        nonlocal pulled
        for i in range(100_000):
            pulled += 1
            yield i

    results = engine_map(_tag, items(), engine, jobs=2, chunk=4, window=2)
    assert next(results)[0] == 0
    assert pulled <= 2 * 2 * 4 + 4  # the chunks in flight, never the whole input
    results.close()  # stops the pool


def test_an_error_in_a_worker_reaches_the_caller(engine: Engine) -> None:
    with pytest.raises(ValueError, match="item 7"):
        list(engine_map(_boom, range(40), engine, jobs=2, chunk=2))
