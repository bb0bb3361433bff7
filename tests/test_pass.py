"""EqSatPass as Inductor's post-grad pass: end to end through torch.compile, and its cache key."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys

import torch

import eqsat
from eqsat.core.spec import KernelSpec, Traffic, params
from eqsat.tools import demo
from tests.conftest import rand, trace


def test_demo_end_to_end_through_torch_compile_dynamic(capsys):
    """The demo compiles with torch.compile(dynamic=True), fuses both norm+quant pairs, and checks
    compiled against eager within one fp8 step; it returns 0 only if all of that held."""
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "rocm_aiter_rmsnorm_with_add_fp8_group_quant" in out and "DEMO OK" in out


def test_uuid_changes_with_every_option_but_how_long():
    """Each option outside ``HOW_LONG_NOT_WHAT`` given another value changes the uuid (Inductor's cache
    would otherwise hand back a graph written under the old value); a field added to ``Options`` must be
    given a value here or be declared as changing how long only."""
    from eqsat.engine.saturate import Budgets
    from eqsat.options import HOW_LONG_NOT_WHAT, Options

    other = {
        "numerics": "exact", "profile": "h200", "standalone_lifts": True, "sizes": 1024, "extractor": "ilp",
        "budgets": Budgets(iterations=7), "strict": True, "emit": "always", "symbolic": "prove",
        "rules": eqsat.Options().active_rules()[1:], "vocabularies": eqsat.Options().vocabularies[:1],
        "catalog": eqsat.DEFAULT_CATALOG.extend(
            [KernelSpec("K_hypothetical", params("x:T"), lambda a: Traffic(0, 0), outputs=("(Leaf 0)",))]),
    }
    names = {f.name for f in dataclasses.fields(Options)}
    assert set(other) | HOW_LONG_NOT_WHAT == names and not set(other) & HOW_LONG_NOT_WHAT
    base = eqsat.EqSatPass().uuid()
    for name, value in other.items():
        assert getattr(Options(), name) != value, name
        assert eqsat.EqSatPass(**{name: value}).uuid() != base, name
    for name, value in {"dump_dir": "/tmp/somewhere", "pause_gc": False, "repeats": False}.items():
        assert eqsat.EqSatPass(**{name: value}).uuid() == base, name


def test_uuid_is_worked_out_once_per_pass(monkeypatch):
    p = eqsat.EqSatPass()
    first = p.uuid()
    monkeypatch.setattr(eqsat.EqSatPass, "_hash", lambda self: "again")
    assert p.uuid() == first and eqsat.EqSatPass().uuid() == "again"


def test_uuid_is_stable_across_processes():
    code = "import eqsat; print(eqsat.EqSatPass().uuid())"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == eqsat.EqSatPass().uuid()


def _norm_quant(x, w):
    return torch.ops.vllm.rocm_aiter_group_fp8_quant(torch.ops.vllm_ir.rms_norm(x, w, 1e-6), 128)


def test_pass_deep_copies_share_its_engine_and_pickles_leave_it():
    """vLLM deep-copies its compile config per backend (each copy's first graph then runs warm, on the
    same engine, with the same result) and pickles it for spawned workers (no engine goes along)."""
    def graph() -> torch.fx.GraphModule:
        return trace(_norm_quant, rand(8, 256), rand(256))

    p = eqsat.EqSatPass()
    p((first := graph()).graph)
    engine, declared = p.engine, set(p.engine.declared)
    clone = copy.deepcopy(p)
    assert clone.engine is engine and clone.options is p.options
    clone((again := graph()).graph)
    assert clone.engine is engine and engine.declared == declared  # warm: nothing declared again
    assert again.graph.python_code("self").src == first.graph.python_code("self").src
    assert clone.last_report.kernels_chosen == p.last_report.kernels_chosen
    assert p.last_report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 1}
    assert clone.last_report.predicted_after_us == p.last_report.predicted_after_us
    pickled = pickle.loads(pickle.dumps(p))
    assert pickled.engine is None and pickled.uuid() == p.uuid()
    pickled(graph().graph)
    assert pickled.engine is not None and pickled.engine is not engine


def test_an_engine_left_holding_rows_is_dropped_for_every_copy():
    p = eqsat.EqSatPass()
    p(trace(_norm_quant, rand(8, 256), rand(256)).graph)
    clone = copy.deepcopy(p)
    p.engine.egraph.run_program(*p.engine.egraph.parse_program("(Fx 0)"))  # a row outside any graph's scope
    p._keep_engine_if_clean()
    assert p.engine is None and clone.engine is None


def test_floats_known_only_at_run_time_are_named_in_the_report():
    """torch.compile(dynamic=True) makes an RMSNorm's eps (a Python float) a 0-d float64 graph input: no
    rule can read it as a constant, and the report says so and how to keep it one; dynamic=None keeps
    it a constant and the chain fuses."""
    from torch._functorch.aot_autograd import aot_module_simplified

    from eqsat.report import RUNTIME_FLOATS_HINT
    from tests.test_lift import quant_native, rms_native

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.rand(512).to(torch.bfloat16), requires_grad=False)
            self.eps = 1e-6

        def forward(self, x):
            return quant_native(rms_native(x.float(), self.weight, self.eps), 128, fmax=448.0,
                                fp8=torch.float8_e4m3fn)

    reports = []

    def backend(gm, inputs):
        def optimize(g, _):
            reports.append(eqsat.optimize(g, profile="h200", sizes=4096))
            return g
        return aot_module_simplified(gm, inputs, fw_compiler=optimize)

    for dynamic in (True, None):
        torch._dynamo.reset()
        reports.clear()
        with torch.no_grad():
            torch.compile(Block(), backend=backend, dynamic=dynamic)(torch.rand(8, 512).to(torch.bfloat16))
        (report,) = reports
        if dynamic:
            assert report.runtime_floats and not report.changed, report.table()
            assert RUNTIME_FLOATS_HINT in report.summary() and "runtime floats" in report.table()
        else:
            assert report.runtime_floats == [] and report.kernels_chosen["K_rmsnorm_fp8_group_quant"] == 1
