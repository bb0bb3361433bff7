"""EqSatPass as Inductor's post-grad pass: end to end through torch.compile, and its cache key."""

from __future__ import annotations

import subprocess
import sys

import torch

import eqsat
from eqsat.core.spec import KernelSpec, Traffic, params
from eqsat.tools import demo


def test_demo_end_to_end_through_torch_compile_dynamic(capsys):
    """The demo compiles with torch.compile(dynamic=True), fuses both norm+quant pairs, and checks
    compiled against eager within one fp8 step; it returns 0 only if all of that held."""
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "rocm_aiter_rmsnorm_with_add_fp8_group_quant" in out and "DEMO OK" in out


def test_uuid_changes_with_options_and_catalog():
    base = eqsat.EqSatPass().uuid()
    assert eqsat.EqSatPass().uuid() == base
    assert eqsat.EqSatPass(numerics="exact").uuid() != base
    assert eqsat.EqSatPass(profile="h200").uuid() != base
    assert eqsat.EqSatPass(sizes=1024).uuid() != base
    extra = KernelSpec("K_hypothetical", params("x:T"), lambda a: Traffic(0, 0), outputs=("(Leaf 0)",))
    assert eqsat.EqSatPass(catalog=eqsat.DEFAULT_CATALOG.extend([extra])).uuid() != base


def test_uuid_is_stable_across_processes():
    code = "import eqsat; print(eqsat.EqSatPass().uuid())"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == eqsat.EqSatPass().uuid()


def test_pass_copies_and_pickles_without_its_engine():
    """vLLM deep-copies its compile config per backend and pickles it for spawned workers."""
    import copy
    import pickle

    from tests.conftest import rand, trace

    p = eqsat.EqSatPass()
    p(trace(lambda x, w: torch.ops.vllm.rocm_aiter_group_fp8_quant(torch.ops.vllm_ir.rms_norm(x, w, 1e-6), 128),
            rand(8, 256), rand(256)).graph)
    assert p._engine is not None
    for clone in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert clone._engine is None and clone.uuid() == p.uuid()
