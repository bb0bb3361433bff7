"""The end-to-end GPU benchmark's plumbing on the CPU (``benchmarks/gpu/e2e.py``, issue 29 part 3).

``test_dry_run_smallest_m`` runs its dry run at the smallest M on every block, with the eqsat variant,
in ``--exec fx`` mode (Inductor's passes with the eqsat pass, then the post-grad graph run by FX: seconds
where C++ code generation takes minutes) and in a subprocess (the benchmark sets torch's global state):
every output passes the check against eager, and the pass ran on each block's graph without error and
wrote it. The other tests check, in process, that the output check is not vacuous and what the always-fuse
profile frees. Run: ``.venv/bin/python -m pytest -q tests/test_e2e_blocks.py`` (about 20 s).
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "benchmarks" / "gpu"


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_dry_run_smallest_m(tmp_path: Path) -> None:
    blocks = ("deepseek", "llama", "qwen3next", "gptoss")
    variants = ("eqsat",)  # always_fuse is the same pass with another profile: the dry run runs it
    cmd = [sys.executable, str(GPU / "e2e.py"), "--dry-run", "--exec", "fx", "--M", "1", "--no-plot",
           "--blocks", *blocks, "--variants", *variants, "--out", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

    rows = {(r["block"], r["variant"]): r for r in _rows(tmp_path / "e2e_dryrun.csv")}
    compiles = {(r["block"], r["variant"]): r for r in _rows(tmp_path / "e2e_dryrun_compile.csv")}
    graphs = (tmp_path / "e2e_dryrun_graphs.txt").read_text()
    for block in blocks:
        for variant in variants:
            r = rows[(block, variant)]
            assert r["check"] == "ok", r
            assert float(r["err_ratio"]) <= 1.0 and float(r["us"]) > 0, r
            assert r["pass_errors"] == "", r
            c = compiles[(block, variant)]
            assert int(c["compiles"]) == 1 and int(c["pass_calls"]) >= 1 and c["error"] == "", c
            assert float(c["pass_s"]) > 0, c
        assert f"-- {block} / eqsat / compiled at M=1:" in graphs
        eqsat = rows[(block, "eqsat")]
        assert float(eqsat["pred_before_us"]) > 0 and float(eqsat["pred_after_us"]) > 0, eqsat
    assert "report: eqsat:" in graphs and "none (pass failed)" not in graphs
    md = (tmp_path / "e2e_dryrun.md").read_text()
    assert "## deepseek" in md and "## Compile time and the pass's share" in md


def test_dry_run_in_vllms_ops(tmp_path: Path) -> None:
    """The DeepSeek and gpt-oss blocks in vLLM's ops (M = 1 and the dynamic graph): every output passes its
    check; the pass writes vLLM's fused ops and nothing of its own vocabulary; always-fuse writes no kernel
    twice (the MLA dual kernel, not it and a second q-norm + quant beside it)."""
    blocks = ("deepseek_vllm", "gptoss_vllm")
    cmd = [sys.executable, str(GPU / "e2e.py"), "--dry-run", "--exec", "fx", "--M", "1", "8", "--no-plot",
           "--blocks", *blocks, "--variants", "eqsat", "always_fuse", "--out", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert all(r["check"] == "ok" for r in _rows(tmp_path / "e2e_dryrun.csv"))
    ops = {(r["block"], r["variant"]): dict(op.rsplit("x", 1) for op in r["eqsat_ops"].split())
           for r in _rows(tmp_path / "e2e_dryrun_compile.csv")}
    for variant in ("eqsat", "always_fuse"):
        ds, gpt = ops[("deepseek_vllm", variant)], ops[("gptoss_vllm", variant)]
        assert ds["vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant"] == "4", ds  # 2 a graph, 2 graphs
        assert ds["vllm.fused_mla_dual_rms_norm_group_quant"] == "2", ds
        assert "vllm.rocm_aiter_rmsnorm_fp8_group_quant" not in ds, ds
        assert gpt["vllm.rocm_aiter_triton_add_rmsnorm_pad"] == "2", gpt
        assert not any(op.startswith(("eqsat", "vllm_ir")) for op in (*ds, *gpt)), (ds, gpt)
    assert ops[("deepseek_vllm", "always_fuse")]["vllm.rocm_aiter_act_mul_and_fp8_group_quant"] == "2"


@pytest.fixture
def e2e(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.syspath_prepend(str(GPU))
    import e2e

    return e2e


def _drop_narrowing_round_trips(gm: torch.fx.GraphModule) -> int:
    """Inductor <= 2.11's ``pointless_convert``: ``float32(bf16(a))`` of an fp32 ``a`` becomes ``a``."""
    convert, dropped = torch.ops.prims.convert_element_type.default, 0
    for n in list(gm.graph.nodes):
        inner = n.args[0] if n.target is convert else None
        if (isinstance(inner, torch.fx.Node) and inner.target is convert and n.args[1] == torch.float32
                and inner.args[1] == torch.bfloat16 and inner.args[0].meta["val"].dtype == torch.float32):
            n.replace_all_uses_with(inner.args[0])
            dropped += 1
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return dropped


def test_the_deepseek_layer_as_torch_2_11_compiles_it_fuses_both_residual_norms(e2e) -> None:  # noqa: ANN001
    """On the H200 (torch 2.11) the DeepSeek layer's post-grad graph has no bf16 round trip of the first
    residual (Inductor drops it); the pass still fuses both add + norm + quant sites."""
    import copy

    import e2e_blocks

    import eqsat
    from eqsat.fx.capture import copy_graph

    class Captured(Exception):
        pass

    graphs: list[torch.fx.GraphModule] = []

    def grab(graph: torch.fx.Graph) -> None:
        graphs.append(copy_graph(graph))
        raise Captured

    block = e2e_blocks.build("deepseek", "cpu", tiny=True)
    x = block.example_inputs(8, "cpu")
    for t in x:
        torch._dynamo.mark_dynamic(t, 0)
    torch._dynamo.reset()
    with torch._inductor.config.patch(post_grad_custom_post_pass=grab, fx_graph_cache=False), \
            pytest.raises(Exception, match="Captured"):
        torch.compile(block)(*x)
    gm = graphs[0]
    assert _drop_narrowing_round_trips(gm) == 1
    sizes = (1, 8, 64, 256, 1024, 4096, 8192)
    report = eqsat.optimize(copy.deepcopy(gm), profile="h200", sizes=sizes, strict=True)
    assert report.kernels_chosen.get("K_rmsnorm_add_fp8_group_quant") == 2, report.summary()
    assert report.rules_fired["lift-add-rms-norm-fp32-residual"] > 0


def test_the_check_fails_a_wrong_output(e2e) -> None:  # noqa: ANN001
    import e2e_blocks

    block = e2e_blocks.build("qwen3next", "cpu", tiny=True)
    x = block.example_inputs(4, "cpu")
    with torch.no_grad():
        ref = e2e.as_tuple(block(*x))
        noise = e2e.fp8_noise(block, x, ref)
    assert 0 < noise[0] < 0.2  # fp8 moves the output by a few percent
    assert e2e.check(block, ref, ref, noise)[0]
    assert not e2e.check(block, (ref[0] * 1.5,), ref, noise)[0]  # a wrong scale
    assert not e2e.check(block, (torch.full_like(ref[0], float("nan")),), ref, noise)[0]

    router = e2e_blocks.build("gptoss", "cpu", tiny=True)
    x = router.example_inputs(4, "cpu")
    with torch.no_grad():
        ref = e2e.as_tuple(router(*x))
    assert e2e.check(router, ref, ref, [0.0] * len(ref))[0]
    wrong = list(ref)
    wrong[3] = ref[1].float().topk(ref[3].shape[-1], largest=False).indices  # the smallest logits
    assert not e2e.check(router, tuple(wrong), ref, [0.0] * len(ref))[0]


def test_always_fuse_frees_the_fused_kernels(e2e) -> None:  # noqa: ANN001
    import eqsat
    from eqsat.cost.roofline import load_profile

    base = load_profile("h200")
    profile, freed = e2e.always_fuse_profile("h200", cuda=False)
    fused = {s.name: s for s in eqsat.DEFAULT_CATALOG.fused() if s.name.startswith("K_")}
    platform = getattr(base, "platform", "any")
    assert set(freed) == {n for n, s in fused.items()
                          if platform == "any" or {platform, "any"} & set(getattr(s, "platforms", {"any"}))}
    assert freed and getattr(profile, "platform", None) == getattr(base, "platform", None)
    for name in freed:
        assert profile.kernels[fused[name].calibration_key].launch_us == e2e.FREE_LAUNCH_US
    for key, timing in base.kernels.items():  # the rest keeps the h200 lines
        if key not in {fused[n].calibration_key for n in freed}:
            assert profile.kernels[key] == timing
    _, on_cuda = e2e.always_fuse_profile("h200", cuda=True)
    assert set(on_cuda) <= set(freed)
    assert eqsat.EqSatPass(profile=profile, emit="always").options.profile is profile


def test_trial_lines_enter_both_passes_profiles(e2e, tmp_path) -> None:  # noqa: ANN001
    """``--lines``: the tables' fitted lines are in the eqsat and always-fuse passes' profiles, the rest
    is the shipped h200 profile's (a line's trial: here the heads twin's, its times doubled)."""
    import csv

    from eqsat.cost.roofline import load_profile
    from eqsat.kernels.inductor import HEADS_KEY

    with open(ROOT / "benchmarks/results/h200_calibration_heads.csv") as f:
        rows = [r for r in csv.DictReader(f) if HEADS_KEY in r["key"]]
    for r in rows:
        r["us"] = str(2 * float(r["us"]))
    table = tmp_path / "trial.csv"
    with open(table, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    base = load_profile("h200")
    trial = {r["key"] for r in rows}
    assert trial == {"inductor:rms_gated_group_quant@heads", "inductor:rms_gated_group_quant@heads@dynamic"}
    for variant in ("eqsat", "always_fuse"):
        p = e2e.make_pass(variant, (8, 8192), False, [str(table)])
        kernels = p.options.profile.kernels
        for k in trial:  # the trial's lines: twice the time, so slower than the shipped ones
            assert kernels[k].launch_us + 1e6 / kernels[k].bandwidth_gbps > \
                base.kernels[k].launch_us + 1e6 / base.kernels[k].bandwidth_gbps
        if variant == "eqsat":  # always-fuse also frees its fused rows' lines
            assert all(kernels[k] == v for k, v in base.kernels.items() if k not in trial)
    assert e2e.make_pass("eqsat", (8, 8192), False).options.profile is base
    h100 = e2e.make_pass("eqsat", (8, 8192), False, profile="h100").options.profile
    assert h100 is load_profile("h100")  # --profile: the card's own (auto on a GPU)
    assert e2e.make_pass("always_fuse", (8, 8192), False, profile="h100").options.profile.name == "h100-always-fuse"


def test_the_fp8_gemms_compute_the_product_of_the_dequantised_operands(e2e) -> None:  # noqa: ANN001
    """Each fp8 weight layout round-trips within fp8's step (partial blocks included: N = 2112, K = 2880 are
    not multiples of 128); every GEMM op (on the CPU: ``dequant_gemm``) is the product of the dequantised
    operands; the fp8 noise floor's reference (quant the identity) takes the bf16 GEMM."""
    import e2e_blocks as B

    gen = torch.Generator().manual_seed(0)
    for n, k in ((2112, 256), (128, 2880)):
        w = torch.randn(n, k, generator=gen) / k ** 0.5
        for per_channel in (False, True):
            q, s = B.quant_weight(w, per_channel)
            assert q.shape == (n, k) and s.shape == ((n, 1) if per_channel else (-(-n // 128), -(-k // 128)))
            assert ((B.dequant(q, s) - w).norm() / w.norm()).item() < 0.04
    x = torch.randn(8, 256, generator=gen).to(torch.bfloat16)
    w = torch.randn(384, 256, generator=gen) / 16
    for quant, per_channel in ((B.group_quant, False), (B.token_quant, True)):
        xq, xs = quant(x)
        wq, ws = B.quant_weight(w, per_channel)
        want = (B.dequant(xq, xs).to(torch.bfloat16) @ B.dequant(wq, ws).to(torch.bfloat16).t())
        for name, op in B.W8A8.items():
            assert torch.equal(op(xq, xs, wq, ws), want), name
    block = B.build("qwen3next", "cpu", tiny=True)
    with pytest.raises(ValueError, match="unknown gemm"):
        B.build("qwen3next", "cpu", tiny=True, gemm="cublas")
    block.fp8 = False
    with torch.no_grad():
        y = block(*block.example_inputs(4, "cpu"))
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()


def test_the_dispatch_follows_the_tuned_table(e2e) -> None:  # noqa: ANN001
    """``choice`` takes AITER where its tuned config won or cuBLAS was wrong or had no kernel, cuBLAS
    otherwise; the tuner's split-K never cuts a scale group."""
    import e2e_blocks as B
    import tune_gemm

    fast, slow = {"us": 5.0, "scaled_mm_us": 9.0, "scaled_mm_err": 1e-3}, {"us": 12.0, "scaled_mm_us": 9.0,
                                                                          "scaled_mm_err": 1e-3}
    assert B.choice(fast, 8) == "aiter" and B.choice(slow, 8) == "scaled_mm"
    assert B.choice({**slow, "scaled_mm_err": 1.6e3}, 8) == "aiter"  # cuBLAS wrong
    assert B.choice({**slow, "scaled_mm_us": float("nan"), "scaled_mm_err": float("nan")}, 1) == "aiter"  # none
    assert B.choice({"scaled_mm_us": 30.0, "scaled_mm_err": 1e-3}, 1024) == "scaled_mm"  # cuBLAS-only entry
    assert B.choice(None, 64) == "aiter" and B.choice(None, 65) == "scaled_mm"
    assert B.choice({"us": 15.3, "scaled_mm_us": 11.1, "scaled_mm_err": 3.8e2}, 256) == "aiter"  # large M, wrong
    for m, k in ((1, 2304), (64, 7168), (8, 1536)):
        for cfg in tune_gemm.candidates(m, k):
            assert (k // 128) % cfg["NUM_KSPLIT"] == 0 and cfg["BLOCK_SIZE_M"] <= max(16, m)
    for m, k in ((256, 2304), (8192, 7168)):  # large M: big tiles, split-K at most 2
        cands = tune_gemm.candidates(m, k)
        assert cands and all((k // 128) % c["NUM_KSPLIT"] == 0 and c["NUM_KSPLIT"] <= 2 and c["BLOCK_SIZE_M"] >= 64
                             for c in cands)


def test_the_shipped_table_never_dispatches_a_wrong_gemm(e2e) -> None:  # noqa: ANN001
    """On every card and shape of ``gemm_tuned.json``, the GEMM the dispatch runs was right where the
    tuner checked it (cuBLAS's block-wise result at K = 2304 is wrong on the H100 and the H200)."""
    import json

    import e2e_blocks as B

    with open(B.TUNED) as f:
        table = json.load(f)
    assert {"NVIDIA H200", "NVIDIA H100 80GB HBM3"} <= set(table)
    for by_shape in table.values():
        for by_m in by_shape.values():
            for m, entry in by_m.items():
                if B.choice(entry, int(m)) == "scaled_mm":
                    assert B.right(entry)
    h100 = table["NVIDIA H100 80GB HBM3"]["7168,2304"]
    assert all(B.choice(e, int(m)) == "aiter" and e.get("config") for m, e in h100.items() if int(m) >= 8)
    assert B.table_note("NVIDIA H100 80GB HBM3").startswith("gemm table: tuned")
    assert "NONE" in B.table_note("NVIDIA B200") and "tune_gemm.py" in B.table_note("NVIDIA B200")  # said in the report


def test_the_dynamic_graph_first_runs_where_asked(e2e) -> None:  # noqa: ANN001
    """M = 1 compiles on its own first; the dynamic graph then first runs (and Inductor times its Triton
    configs) at the smallest M >= 2, or at the largest, as vLLM's profile run at max_num_tokens does."""
    ms = [8192, 1, 64, 8, 4096]
    assert e2e.run_order(ms, "smallest") == [1, 8, 64, 4096, 8192]
    assert e2e.run_order(ms, "largest") == [1, 8192, 8, 64, 4096]
    assert e2e.run_order([1], "largest") == [1]


class _Replays:
    """A captured forward whose every replay takes ``us`` (the interleaved timing's view of a GraphTimer),
    noting its name in ``order`` when replayed."""

    def __init__(self, name: str, us: float, order: list[str]) -> None:
        self.name, self.us, self.order = name, us, order

    def sample_us(self) -> float:
        self.order.append(self.name)
        return self.us


def test_interleaved_replays_rotate_their_order(e2e) -> None:  # noqa: ANN001
    import gpu_timing

    order: list[str] = []
    timers = {n: _Replays(n, us, order) for n, us in (("a", 1.0), ("b", 2.0), ("c", 3.0))}
    samples = gpu_timing.interleave(timers, 4)
    assert samples == {"a": [1.0] * 4, "b": [2.0] * 4, "c": [3.0] * 4}
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert [list(c) for c in e2e._chunks(list(range(7)), 3)] == [[0, 1], [2, 3, 4], [5, 6]]
    assert [list(c) for c in e2e._chunks([5.0], 3)] == [[5.0]]


def test_interleaved_rows_are_timed_against_inductor_with_its_noise_floor(e2e, tmp_path: Path) -> None:  # noqa: ANN001
    """A round's pending rows at one M: each variant's speedup is over Inductor alone's median from the same
    replays, the predicted whole speedup is over that median less the predicted saving, and Inductor's row
    holds the ratio of its two captures (the A/A noise floor), which the report shows per M."""
    import io

    run = e2e.Run.__new__(e2e.Run)  # no passes, no warm-up compile: only the timing's bookkeeping
    run.args = e2e.parse(["--dry-run", "--samples", "6", "--repeats", "2", "--out", str(tmp_path)])
    run.pending, run.rows, run.rnd, run.cuda = {}, [], 0, False
    run._csv = io.StringIO()
    run._writer = e2e.csv.DictWriter(run._csv, fieldnames=e2e.FIELDS)
    order: list[str] = []
    ind = e2e._Measured({"block": "b", "variant": "inductor", "M": 8, "check": "ok", "err_ratio": "0.1"}, None, "",
                        {"inductor": _Replays("i", 10.0, order), "inductor (again)": _Replays("i2", 10.5, order)})
    eqs = e2e._Measured({"block": "b", "variant": "eqsat", "M": 8, "check": "ok", "err_ratio": "0.1"}, 1.0, "",
                        {"eqsat": _Replays("e", 8.0, order)})
    run.pending[8] = [eqs, ind]  # in the order they were checked: Inductor's row is recorded first anyway
    base: dict[int, float] = {}
    run.time_pending(base)
    assert not run.pending and base == {8: 10.0} and len(order) == 18
    rows = {r["variant"]: r for r in run.rows}
    assert [r["variant"] for r in run.rows] == ["inductor", "eqsat"]
    assert rows["inductor"]["aa_ratio"] == f"{10.0 / 10.5:.3f}" and rows["eqsat"]["aa_ratio"] == ""
    assert rows["eqsat"]["speedup"] == "1.250" and rows["eqsat"]["pred_speedup_whole"] == f"{10 / 9:.3f}"
    assert rows["eqsat"]["timing"] == "interleaved" and rows["eqsat"]["rep_medians_us"] == "8.00 8.00"
    run.args.blocks = ["b"]
    md = e2e.markdown(run.rows, [], run.args, [], 1.0)
    assert "Inductor A/A" in md and f"{10 / 10.5:.3f} ({10 / 10.5:.3f}-{10 / 10.5:.3f})" in md


def test_a_replay_that_fails_marks_its_rows_and_the_run_goes_on(e2e, tmp_path: Path) -> None:  # noqa: ANN001
    import io

    class Broken:
        def sample_us(self) -> float:
            raise RuntimeError("replay failed")

    run = e2e.Run.__new__(e2e.Run)
    run.args = e2e.parse(["--dry-run", "--samples", "3", "--out", str(tmp_path)])
    run.pending, run.rows, run.rnd, run.cuda = {}, [], 0, False
    run._csv = io.StringIO()
    run._writer = e2e.csv.DictWriter(run._csv, fieldnames=e2e.FIELDS)
    run.pending[64] = [e2e._Measured({"block": "b", "variant": "eqsat", "M": 64, "check": "ok"}, None, "",
                                     {"eqsat": Broken()})]
    run.pending[8] = [e2e._Measured({"block": "b", "variant": "eqsat", "M": 8, "check": "ok", "err_ratio": "0.1"}, None, "",
                                    {"eqsat": _Replays("e", 8.0, [])})]
    run.time_pending({})
    got = {int(r["M"]): r for r in run.rows}
    assert got[64]["check"] == "error" and "replay failed" in got[64]["detail"] and got[64]["us"] == ""
    assert got[8]["check"] == "ok" and got[8]["us"] == "8.00"


@pytest.mark.parametrize("gpu, tag", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                      ("NVIDIA A100-SXM4-80GB", "nvidiaa100sxm480")])
def test_result_files_are_named_by_the_cards_profile(e2e, monkeypatch, gpu, tag) -> None:  # noqa: ANN001
    """``measure.py`` and ``e2e.py`` name their files (and the calibration table its device column) by the
    card: its profile's name where one was measured on it, else the letters and digits of its name."""
    import gpu_timing

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: gpu)
    assert gpu_timing.gpu_tag() == tag
    assert e2e.parse(["--blocks", "gptoss", "--profile", "h200"]).tag == tag
    if tag in ("h100", "h200"):
        assert e2e.parse(["--blocks", "gptoss"]).profile == tag  # --profile auto: the card's own
    else:  # no profile measured on that card: a clear error, unless one is named
        with pytest.raises(SystemExit):
            e2e.parse(["--blocks", "gptoss"])


def test_a_stack_is_its_layers_in_turn_and_the_pass_fuses_every_layer(e2e) -> None:  # noqa: ANN001
    """``e2e_blocks.Stack`` (``probe_model_compile``, ``capture_graphs --layers``): each layer's output is the
    next one's input, only decoder layers stack, and in the one graph of three layers the pass fuses each
    layer's sites (two add + norm + quant, the MLA pair, silu + quant a layer)."""
    import copy

    import e2e_blocks

    import eqsat
    from eqsat.fx.capture import copy_graph

    stack = e2e_blocks.Stack("deepseek", 3, "cpu", tiny=True).eval()
    x = stack.example_inputs(5, "cpu")
    want = x
    for layer in stack.layers:
        want = layer(*want)
    for got, w in zip(stack(*x), want, strict=True):
        assert torch.equal(got, w)
    with pytest.raises(ValueError, match="a stack is"):
        e2e_blocks.Stack("qwen3next", 2, "cpu", tiny=True)

    graphs: list[torch.fx.GraphModule] = []
    torch._dynamo.reset()
    with torch._inductor.config.patch(post_grad_custom_post_pass=lambda g: graphs.append(copy_graph(g)),
                                      fx_graph_cache=False):
        torch.compile(stack, backend=e2e.Backend(exec_fx=True))(*x)
    torch._dynamo.reset()
    report = eqsat.optimize(copy.deepcopy(graphs[0]), profile="h200", sizes=(1, 8, 64, 256, 1024, 4096, 8192),
                            strict=True)
    assert report.kernels_chosen == {"K_rmsnorm_add_fp8_group_quant": 6, "K_mla_dual_rms_norm_group_quant": 3,
                                     "K_silu_mul_fp8_group_quant": 3}, report.summary()
