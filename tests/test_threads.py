"""The pass from any thread: each thread that runs it gets its own engine (egglog's e-graph answers only
on the thread that made it), let go on that thread; an egglog panic is an ordinary failure. pytest
turns an e-graph let go on the wrong thread (egglog reports it only as unraisable) into an error."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
import torch
from egglog import bindings as eb

import eqsat
from eqsat.core.errors import EnginePanic, is_panic
from eqsat.engine.engine import Engine
from tests.conftest import rand, trace

FUSED = {"K_rmsnorm_fp8_group_quant": 1}


def _norm_quant(x, w):
    return torch.ops.vllm.rocm_aiter_group_fp8_quant(torch.ops.vllm_ir.rms_norm(x, w, 1e-6), 128)


def _graph() -> torch.fx.GraphModule:
    return trace(_norm_quant, rand(8, 256), rand(256))


def _on_a_thread(fn, *args):
    got: list[object] = []
    worker = threading.Thread(target=lambda: got.append(fn(*args)))
    worker.start()
    worker.join()
    return got[0]


def _panic() -> BaseException:
    """A real ``pyo3_runtime.PanicException``: an e-graph called from a thread that did not make it."""
    made, ready, done = [], threading.Event(), threading.Event()

    def own() -> None:  # makes the e-graph, and lets it go on this thread once the caller is done with it
        made.append(eb.EGraph())
        ready.set()
        done.wait()
        made.clear()

    owner = threading.Thread(target=own)
    owner.start()
    ready.wait()
    try:
        made[0].parse_program("(relation R (i64))")
    except BaseException as exc:  # noqa: BLE001 - the point: it is not an Exception
        caught = exc.with_traceback(None)  # no frame of this thread keeps the e-graph
    else:
        raise AssertionError("an e-graph made on another thread answered")
    finally:
        done.set()
        owner.join()
    return caught


def test_an_egraph_is_bound_to_its_thread_and_its_panic_is_no_exception():
    """The premise of an engine per thread: if egglog ever lets an e-graph move, this test goes."""
    exc = _panic()
    assert is_panic(exc) and not isinstance(exc, Exception)


def test_the_pass_runs_from_any_thread_each_on_its_own_engine():
    """A compile in a worker thread (before the main thread's, after it, several at once) fuses as the
    main thread's does, on an engine of its own; a thread's engine goes with the thread."""
    p = eqsat.EqSatPass()

    made: list[weakref.ref[Engine]] = []

    def run_one(gm: torch.fx.GraphModule) -> tuple[str, dict[str, int], str | None, int]:
        p(gm.graph)
        engine = p.engine
        assert engine is not None
        made.append(weakref.ref(engine))
        return gm.graph.python_code("self").src, dict(p.last_report.kernels_chosen), p.last_report.error, id(engine)

    first = _on_a_thread(run_one, _graph())
    src, kernels, error, _ = run_one(_graph())
    main = p.engine
    assert (kernels, error) == (FUSED, None) and first[:3] == (src, FUSED, None)
    graphs = [_graph() for _ in range(4)]  # traced here: torch's tracer is not thread-safe
    results: list[tuple[str, dict[str, int], str | None, int]] = []
    workers = [threading.Thread(target=lambda gm=gm: results.append(run_one(gm))) for gm in graphs]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert [r[:3] for r in results] == [(src, FUSED, None)] * 4
    assert id(main) not in {r[3] for r in results} and p.engine is main
    gc.collect()
    assert [m() is not None for m in made] == [False, True, False, False, False, False]  # went with their threads


def test_a_thread_after_a_failed_graph_keeps_its_engine_and_other_threads_theirs(monkeypatch):
    p = eqsat.EqSatPass()
    p(_graph().graph)
    main = p.engine
    monkeypatch.setattr(Engine, "load", lambda self, imported: (_ for _ in ()).throw(RuntimeError("boom")))
    assert _on_a_thread(lambda: (p(_graph().graph), p.last_report.error)[1]).startswith("load: RuntimeError")
    monkeypatch.undo()
    p(_graph().graph)
    assert p.engine is main and p.last_report.kernels_chosen == FUSED


@pytest.mark.parametrize("strict", [False, True])
def test_an_egglog_panic_fails_the_graph_not_the_compile(monkeypatch, strict):
    panic = type(_panic())

    def load(self, imported):
        raise panic("a panic inside egglog")

    monkeypatch.setattr(Engine, "load", load)
    p = eqsat.EqSatPass(strict=strict)
    gm = _graph()
    before = gm.graph.python_code("self").src
    if strict:
        with pytest.raises(eqsat.EqSatInternalError) as info:
            p(gm.graph)
        assert isinstance(info.value.__cause__, EnginePanic)
    else:
        p(gm.graph)
        assert "EnginePanic" in p.last_report.error and "a panic inside egglog" in p.last_report.error
    assert gm.graph.python_code("self").src == before
    assert "EnginePanic" in eqsat.optimize(_graph(), strict=False).error  # optimize's own engine too
    monkeypatch.undo()
    p(gm.graph)
    assert p.last_report.kernels_chosen == FUSED  # the engine served on
