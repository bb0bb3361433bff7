"""EqSatPass inside the real vLLM 0.33.0 on this CPU machine (``make test-vllm`` builds .venv-vllm).

What runs here: vLLM's CompilationConfig / VllmConfig, VllmBackend.configure_post_pass (the hook
that hands ``inductor_compile_config["post_grad_custom_post_pass"]`` to PostGradPassManager.add),
the manager's uuid() and __call__ with its own passes, and the real ``vllm_ir`` ops (their native
implementation). What does not: the AITER ops (ROCm builds only; eqsat's stand-ins with vLLM's
schemas replace them) and the manager's last pass, FixFunctionalizationPass (it needs the
compiled ``_C`` ops, see test_fix_functionalization_runs_here). See docs/vllm.md.
"""

from __future__ import annotations

import copy
import json
import logging
import pickle

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed in this venv; `make test-vllm` builds "
                    ".venv-vllm with vllm==0.33.0 and runs these tests")

import torch  # noqa: E402

from eqsat.kernels.torch_ops import register_vllm_standins  # noqa: E402
from eqsat.library import define as library  # noqa: E402

if "vllm_ir" in library._LIBS:
    pytest.skip("eqsat's vllm_ir stand-ins were registered before vLLM was imported (tests/conftest.py "
                "calls register_vllm_standins() when it is loaded), so vLLM cannot register its real "
                "vllm_ir ops in this process (duplicate-definition RuntimeError). Import vLLM first: "
                "`make test-vllm` runs `pytest -p vllm.ir tests/vllm`", allow_module_level=True)

import vllm.ir  # noqa: E402, F401  (registers the real vllm_ir ops, before any stand-in can)
from vllm.compilation.backends import VllmBackend  # noqa: E402
from vllm.compilation.passes.inductor_pass import (  # noqa: E402
    InductorPass,
    pass_context,
)
from vllm.compilation.passes.pass_manager import PostGradPassManager  # noqa: E402
from vllm.config import (  # noqa: E402
    CompilationConfig,
    DeviceConfig,
    PassConfig,
    VllmConfig,
    set_current_vllm_config,
)
from vllm.config.utils import Range  # noqa: E402
from vllm.platforms import current_platform  # noqa: E402

from eqsat.fx.capture import trace_tokens  # noqa: E402
from eqsat.library import reference as ref  # noqa: E402
from eqsat.pass_ import range_sizes  # noqa: E402
from eqsat.vllm import VllmEqSatPass  # noqa: E402

register_vllm_standins()

KEY = "post_grad_custom_post_pass"
AITER_OPS = ("rocm_aiter_group_fp8_quant", "rocm_aiter_rmsnorm_fp8_group_quant",
             "rocm_aiter_rmsnorm_with_add_fp8_group_quant")
G, EPS, HIDDEN = 128, 1e-6, 512
# vLLM's own fusions that would consume the norm/quant patterns before a user pass (docs/vllm.md).
OWN_FUSIONS_OFF = {"fuse_norm_quant": False, "fuse_act_quant": False, "fuse_mla_dual_rms_norm": False,
                   "fuse_act_padding": False}


def vllm_c_error() -> str | None:
    """Why vLLM's compiled ops (torch.ops._C.*, from vllm._C_stable_libtorch) are missing, if they are."""
    if hasattr(torch.ops._C, "rotary_embedding"):
        return None
    try:
        import vllm._C_stable_libtorch  # noqa: F401
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "vllm._C_stable_libtorch imported but registered no _C::rotary_embedding"


def vllm_config(pass_: object, **pass_flags: bool) -> VllmConfig:
    """The smallest VllmConfig that works here: device pinned to CPU (device="auto" raises "Failed
    to infer device type" because vLLM's platform is UnspecifiedPlatform on a CPU-only machine with
    the CUDA wheel), no model, vLLM's own norm/quant fusions off."""
    cc = CompilationConfig(inductor_compile_config={KEY: pass_},
                           pass_config=PassConfig(**{**OWN_FUSIONS_OFF, **pass_flags}))
    return VllmConfig(compilation_config=cc, device_config=DeviceConfig(device="cpu"))


def manager_for(pass_: InductorPass) -> PostGradPassManager:
    """The manager exactly as vLLM builds it: VllmBackend.configure_post_pass."""
    vc = vllm_config(pass_)
    with set_current_vllm_config(vc):
        backend = VllmBackend(vc)
        backend.configure_post_pass()
    assert backend.inductor_config[KEY] is backend.pass_manager
    return backend.pass_manager


def layer(x, residual, w1, w2):
    """Real vllm_ir norms, each followed by the (stand-in) AITER group quant."""
    y = torch.ops.vllm_ir.rms_norm(x, w1, EPS)
    q1, s1 = torch.ops.vllm.rocm_aiter_group_fp8_quant(y, G)
    h, res = torch.ops.vllm_ir.fused_add_rms_norm(x, residual, w2, EPS)
    q2, s2 = torch.ops.vllm.rocm_aiter_group_fp8_quant(h, G)
    return q1, s1, q2, s2, res


def inputs(tokens: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(tokens, HIDDEN), (tokens, HIDDEN), (HIDDEN,), (HIDDEN,)]
    return [torch.randn(*s, generator=g).to(torch.bfloat16) for s in shapes]


def targets(gm: torch.fx.GraphModule) -> set[str]:
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"} - {"<built-in function getitem>"}


def assert_matches_unfused(gm: torch.fx.GraphModule, unfused: torch.fx.GraphModule) -> None:
    for tokens in (32, 7):
        args = inputs(tokens, seed=tokens)
        want, got = unfused(*args), gm(*args)
        assert ref.fp8_step_error(want[0], want[1], got[0], got[1], G) <= 1.25
        assert ref.fp8_step_error(want[2], want[3], got[2], got[3], G) <= 1.25
        torch.testing.assert_close(got[4], want[4])


FUSED = {"vllm.rocm_aiter_rmsnorm_fp8_group_quant.default",
         "vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant.default"}


def test_standins_keep_the_real_vllm_ir_ops():
    assert "vllm_ir" not in library._LIBS
    for op in ("rms_norm", "fused_add_rms_norm"):
        where = torch._C._dispatch_dump(f"vllm_ir::{op}")
        assert "vllm/ir/op.py" in where and "eqsat" not in where, where
    # vLLM registers the AITER ops only on ROCm (rocm_aiter_ops.register_ops_once returns early on
    # other platforms), so here the stand-ins define them, with vLLM's schemas.
    assert not current_platform.is_rocm()
    for op in AITER_OPS:
        assert "eqsat/library/define.py" in torch._C._dispatch_dump(f"vllm::{op}")
    x, _, w, _ = inputs(4)
    torch.testing.assert_close(torch.ops.vllm_ir.rms_norm(x, w, EPS), ref.rms_norm(x, w, EPS).to(x.dtype))


def test_compilation_config_keeps_our_pass_and_hashes_its_uuid():
    p = VllmEqSatPass()
    vc = vllm_config(p)
    cc = vc.compilation_config
    assert cc.inductor_compile_config[KEY] is p  # kept as is, beside vLLM's own inductor settings
    assert cc.inductor_compile_config["enable_auto_functionalized_v2"] is False
    assert not any(getattr(cc.pass_config, flag) for flag in OWN_FUSIONS_OFF)
    # vLLM's config hash (its compile-cache key) takes the pass's uuid().
    assert vllm_config(VllmEqSatPass()).compilation_config.compute_hash() == cc.compute_hash()
    assert vllm_config(VllmEqSatPass(profile="h200")).compilation_config.compute_hash() != cc.compute_hash()


def test_inductor_passes_takes_names_only():
    """vLLM 0.33.0 types CompilationConfig.inductor_passes as dict[str, str] (qualified names,
    resolved with __import__ of the top-level module): a pass object must go through
    inductor_compile_config."""
    with pytest.raises(ValueError, match="valid string"):
        CompilationConfig(inductor_passes={KEY: VllmEqSatPass()})


def test_vllm_pass_class_is_an_inductor_pass():
    """vLLM asserts isinstance(pass_, InductorPass); eqsat.vllm.VllmEqSatPass is one, EqSatPass (torch
    only, importable without vLLM) is not."""
    p = VllmEqSatPass()
    assert isinstance(p, InductorPass) and manager_for(p).passes[-1] is p


def test_vllm_backend_adds_our_pass_after_its_own():
    p = VllmEqSatPass()
    pm = manager_for(p)
    assert type(pm) is PostGradPassManager
    assert [type(x).__name__ for x in pm.passes] == ["NoOpEliminationPass", "VllmEqSatPass"]
    assert pm.passes[-1] is p


def test_our_uuid_inside_the_managers_uuid():
    def manager_uuid(p: InductorPass, rng: Range) -> str:
        with pass_context(rng):
            return manager_for(p).uuid()

    r = Range(start=1, end=8192)
    base = manager_uuid(VllmEqSatPass(), r)
    assert manager_uuid(VllmEqSatPass(), r) == base
    assert manager_uuid(VllmEqSatPass(numerics="exact"), r) != base
    assert manager_uuid(VllmEqSatPass(), Range(start=16, end=16)) != base


class Spy:
    """Wraps one of the manager's passes and records that it ran; runs it unless told not to."""

    def __init__(self, inner: object, order: list[str], run: bool = True) -> None:
        self.inner, self.order, self.run = inner, order, run

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.order.append(type(self.inner).__name__ + ("" if self.run else " (not run)"))
        if self.run:
            self.inner(graph)

    def uuid(self) -> str:
        return self.inner.uuid()

    def is_applicable_for_range(self, compile_range: Range) -> bool:
        return self.inner.is_applicable_for_range(compile_range)


def test_manager_runs_our_pass_with_its_own_passes_on_real_vllm_ir_ops(caplog):
    unfused = trace_tokens(layer, *inputs(32))
    gm = trace_tokens(layer, *inputs(32))
    assert {"vllm_ir.rms_norm.default", "vllm_ir.fused_add_rms_norm.default"} <= targets(gm)
    p = VllmEqSatPass()
    pm = manager_for(p)
    order: list[str] = []
    pm.passes = [Spy(x, order) for x in pm.passes]
    for name in ("post_cleanup", "ir_lowering", "clone_elimination"):
        setattr(pm, name, Spy(getattr(pm, name), order))
    pm.fix_functionalization = Spy(pm.fix_functionalization, order, run=vllm_c_error() is None)
    rng = Range(start=1, end=8192)
    with caplog.at_level(logging.DEBUG, logger="eqsat"), pass_context(rng):
        pm(gm.graph)
    gm.recompile()

    assert order[:-1] == ["NoOpEliminationPass", "VllmEqSatPass", "PostCleanupPass", "VllmIRLoweringPass",
                          "UnsafeCloneEliminationPass", "PostCleanupPass"]
    assert order[-1].startswith("FixFunctionalizationPass")
    # vLLM's range reached the pass: it costed the graph at sizes sampled from [1, 8192].
    assert p._range_sizes == range_sizes(rng) and p._range_sizes[0] == 1 and p._range_sizes[-1] == 8192
    assert p.last_report.kernels_chosen == {"K_rmsnorm_fp8_group_quant": 1, "K_rmsnorm_add_fp8_group_quant": 1}
    assert targets(gm) == FUSED  # nothing of the unfused ops is left after vLLM's cleanup
    assert_matches_unfused(gm, unfused)
    # Logs: one INFO summary line per graph on logger "eqsat", the report table at DEBUG.
    info = [r for r in caplog.records if r.name == "eqsat" and r.levelno == logging.INFO]
    assert [r.getMessage() for r in info] == [p.last_report.summary()]
    assert any(r.name == "eqsat" and r.levelno == logging.DEBUG and "eqsat report" in r.getMessage()
               for r in caplog.records)


def test_fix_functionalization_runs_here():
    if error := vllm_c_error():
        pytest.skip("vLLM's FixFunctionalizationPass (the manager's last step) looks up "
                    "torch.ops._C.rotary_embedding, which vllm._C_stable_libtorch registers; that library "
                    f"does not load on this machine ({error}: no NVIDIA driver)")
    gm = trace_tokens(layer, *inputs(32))
    with pass_context(Range(start=1, end=8192)):
        manager_for(VllmEqSatPass())(gm.graph)
    assert targets(gm) == FUSED


def test_pass_alone_rewrites_real_vllm_ir_graph_per_compile_size():
    unfused = trace_tokens(layer, *inputs(32))
    gm = trace_tokens(layer, *inputs(32))
    p = VllmEqSatPass(profile="mi300x")
    assert p.is_applicable_for_range(Range(start=256, end=256))  # a compile size: one exact size
    p(gm.graph)
    assert p._range_sizes == (256,) and p.last_report.changed and p.last_report.error is None
    assert targets(gm) == FUSED
    assert_matches_unfused(gm, unfused)


def test_backend_can_deepcopy_the_config_after_the_pass_ran():
    """Every VllmBackend (one per compiled model: the main model, a drafter, an encoder) deep-copies
    inductor_compile_config in __init__, so the pass must survive a deepcopy after it has run; the copy
    shares the pass's engine, so the backend's first graph runs warm."""
    p = VllmEqSatPass()
    p(trace_tokens(layer, *inputs(32)).graph)
    vc = vllm_config(p)
    with set_current_vllm_config(vc):
        backend = VllmBackend(vc)  # deep-copies the config
    assert backend.inductor_config[KEY].engine is p.engine is not None
    assert copy.deepcopy(p).uuid() == p.uuid()


def test_config_pickles_for_spawned_workers():
    """With the spawn start method (Ray, CUDA initialised before LLM(), VLLM_WORKER_MULTIPROC_METHOD=
    spawn) the VllmConfig is pickled to the engine process; the default fork start method does not."""
    cc = vllm_config(VllmEqSatPass()).compilation_config
    assert pickle.loads(pickle.dumps(cc)).inductor_compile_config[KEY].uuid() == cc.inductor_compile_config[KEY].uuid()


def layer_with_an_op_eqsat_does_not_know(x, residual, w1, w2):
    """``layer`` plus vLLM's real ``vllm_ir.gelu_and_mul_sparse``, which no eqsat stand-in defines."""
    q1, s1, q2, s2, res = layer(x, residual, w1, w2)
    return q1, s1, q2, s2, torch.ops.vllm_ir.gelu_and_mul_sparse(res, 1.0)


def test_a_dump_taken_inside_vllm_replays_offline_without_vllm(tmp_path):
    """EQSAT_DUMP_DIR inside vLLM writes before.json; the main venv (no vLLM) loads it, the op it has
    never seen as an opaque stand-in, and makes the same choice (docs/vllm.md)."""
    import subprocess
    from pathlib import Path

    main_python = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
    if not main_python.exists():
        pytest.skip("the main .venv (make test) is not built")
    gm = trace_tokens(layer_with_an_op_eqsat_does_not_know, *inputs(32))
    p = VllmEqSatPass(profile="mi300x", dump_dir=str(tmp_path))
    assert p.is_applicable_for_range(Range(start=256, end=256))
    p(gm.graph)
    chosen = dict(p.last_report.kernels_chosen)
    assert chosen == {"K_rmsnorm_fp8_group_quant": 1, "K_rmsnorm_add_fp8_group_quant": 1}
    (saved,) = tmp_path.glob("graph_*/before.json")
    replay = ("import json, sys, eqsat; from eqsat import graphfile; "
              "from eqsat.kernels.torch_ops import register_vllm_standins; register_vllm_standins(); "
              "gm = graphfile.load(sys.argv[1]); "
              "assert not hasattr(__import__('torch').ops.vllm_ir, 'gelu_and_mul_sparse'); "
              "r = eqsat.optimize(gm, profile='mi300x', sizes=256, strict=True); "
              "print(json.dumps(dict(r.kernels_chosen)))")
    out = subprocess.run([str(main_python), "-c", replay, str(saved)], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == chosen
