"""Coverage of vLLM's ROCm/AITER fusion patterns, generated from test results: ``docs/coverage.md``.

    python -m benchmarks.coverage     # runs the listed tests, writes docs/coverage.md

``TABLE`` maps each pattern class of ``reference/vllm-facts.md`` §1.2 and each variant (quant form,
the cases vLLM misses) to the test that shows it; the status column is the outcome of running that
test now (``passed`` / ``failed`` / ``xfail``), or ``no test`` where the project has none yet.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "coverage.md"

# (pattern, vLLM class, variant, test node id or None)
TABLE: list[tuple[str, str, str, str | None]] = [
    ("#1", "AiterRMSNormDynamicQuantPattern", "AITER functional per-token quant",
     "tests/test_token_static.py::test_fuse_rmsnorm_dynamic_quant"),
    ("#1", "AiterRMSNormDynamicQuantPattern", "_C under auto_functionalized",
     "tests/test_token_static.py::test_c_dynamic_per_token_quant_fuses"),
    ("#1", "AiterRMSNormDynamicQuantPattern", "native ATen (224 on fnuz, rounding)",
     "tests/test_token_static.py::test_lift_native_quants"),
    ("#2", "AiterFusedAddRMSNormDynamicQuantPattern", "AITER functional", "tests/test_token_static.py::test_fuse_add_rmsnorm_dynamic_quant"),
    ("#3", "AiterRMSFp8GroupQuantPattern", "AITER functional, eps a variable (eps 3e-4)",
     "tests/test_rules.py::test_fuse_rmsnorm_group_quant"),
    ("#3", "AiterRMSFp8GroupQuantPattern", "G = 64, 32 in eqsat's own ops (vLLM's per_1x128 quant takes G = 128 only)",
     "tests/test_rules.py::test_fuse_rmsnorm_group_quant_any_group_in_eqsat_ops"),
    ("#3", "AiterRMSFp8GroupQuantPattern", "torch.compile(dynamic=True): hidden dim symbolic, fused under a guard",
     "tests/test_explain.py::test_dynamic_true_fuses_under_a_guard_on_the_hidden_dim"),
    ("#3", "AiterRMSFp8GroupQuantPattern", "_C per_token_group_fp8_quant under auto_functionalized",
     "tests/test_functionalized.py::test_c_ops_under_auto_functionalized_fuse"),
    ("#3", "AiterRMSFp8GroupQuantPattern", "native ATen rms_norm + native group quant (224, rounding)",
     "tests/test_lift.py::test_all_native_norm_and_quant_fuse"),
    ("#4", "AiterFusedAddRMSFp8GroupQuantPattern", "AITER functional", "tests/test_rules.py::test_fuse_add_rmsnorm_group_quant"),
    ("#4", "AiterFusedAddRMSFp8GroupQuantPattern", "native fused-add chain", "tests/test_lift.py::test_lift_add_rms_norm_fuses_group_quant"),
    ("#5", "DoubleAiterRMSFp8GroupQuantPattern", "two identical quants of one norm: computed once",
     "tests/test_budgets.py::test_64_identical_quant_consumers_share_one_kernel"),
    ("#6", "DoubleAiterRMSFp8GroupQuantViewPattern", "norm over [T, 2, N] -> view(-1, N) -> two quants (vLLM's fakes are 2-D)",
     "tests/test_rows.py::test_the_v32_indexer_fan_out_over_a_3d_norm_fuses"),
    ("#7", "AiterRMSNormGatedFp8GroupQuantPattern", "(N*H, D) and (N, H, D) x AITER / native quant x native / fla norm",
     "tests/test_gated.py::test_canonical_graphs_fuse"),
    ("#7", "AiterRMSNormGatedFp8GroupQuantPattern", "_C quant under auto_functionalized, both layouts, both norm forms",
     "tests/test_gated.py::test_c_quant_under_auto_functionalized_fuses"),
    ("#7", "AiterRMSNormGatedFp8GroupQuantPattern", "any eps; G = 64, D = 256, D = 64 (vLLM: D = G = 128 only)",
     "tests/test_gated.py::test_any_eps_and_group_the_kernel_takes"),
    ("#7", "AiterRMSNormGatedFp8GroupQuantPattern", "Qwen3-Next benchmark graphs, both layouts (heads from shapes, not layers)",
     "tests/test_gated.py::test_qwen3_next_benchmark_graph_fuses"),
    ("#7", "AiterRMSNormGatedFp8GroupQuantPattern", "native quant through torch.compile (Inductor drops the 3-D layout's reshapes)",
     "tests/test_gated.py::test_native_quant_through_torch_compile_fuses"),
    ("#8", "AiterRMSNormStaticQuantPattern", "AITER per_tensor_quant (auto_functionalized)",
     "tests/test_token_static.py::test_aiter_per_tensor_quant_under_auto_functionalized"),
    ("#8", "AiterRMSNormStaticQuantPattern", "static scale that is a graph input written back (copy_)",
     "tests/test_token_static.py::test_aiter_per_tensor_quant_of_a_scale_input_fuses"),
    ("#8", "AiterRMSNormStaticQuantPattern", "_C static_scaled_fp8_quant", "tests/test_token_static.py::test_c_static_quant_fuses"),
    ("#9", "AiterFusedAddRMSNormStaticQuantPattern", "AITER functional", "tests/test_token_static.py::test_fuse_add_rmsnorm_static_quant"),
    ("#10", "AiterSiluMulFp8GroupQuantPattern", "eqsat / AITER ops", "tests/test_act_inductor.py::test_fuse_silu_mul_group_quant"),
    ("#10", "AiterSiluMulFp8GroupQuantPattern", "_C silu_and_mul under auto_functionalized", "tests/test_functionalized.py::test_c_silu_and_quant_fuse"),
    ("#10", "AiterSiluMulFp8GroupQuantPattern", "Inductor's fusion chosen where cheaper (per range)",
     "tests/test_ranges.py::test_pass_costs_each_compile_range_separately"),
    ("#11", "AddAiterRMSNormPadPattern", "hidden 2880 and other sizes, router GEMM reads the slice",
     "tests/test_mla_pad.py::test_fuse_add_rmsnorm_pad"),
    ("#12", "MLADualRMSNormPattern", "q and kv eps independent", "tests/test_mla_pad.py::test_fuse_mla_dual_rms_norm"),
    ("#13", "MLADualRMSPerTokenQuantPattern", "q side unfused or already fused", "tests/test_mla_pad.py::test_fuse_mla_dual_rms_norm_per_token_quant"),
    ("#14", "MLADualRMSGroupQuantPattern", "q side unfused or already fused", "tests/test_mla_pad.py::test_fuse_mla_dual_rms_norm_group_quant"),
    ("misses", "—", "third (bf16) consumer beside quants, decided by cost",
     "tests/test_misses.py::test_third_bf16_consumer_is_decided_by_cost"),
    ("misses", "—", "fp8 e4m3fnuz mixed with e4m3fn: never merged", "tests/test_misses.py::test_fnuz_and_fn_quants_are_never_merged"),
    ("negative", "—", "weight dtype != input dtype; 3-D / strided input; bad static scale", "tests/test_token_static.py::test_no_rewrite"),
    ("negative", "—", "G not a power of two / not dividing N", "tests/test_pipeline.py::test_group_size_checked_against_kernel_and_shape"),
    ("negative", "—", "mutation between norm and quant", "tests/test_pipeline.py::test_mutation_between_norm_and_quant_is_untouched"),
    ("negative", "—", "Gemma (1 + w) norm is not rms_norm(x, w)", "tests/test_lift.py::test_near_miss_is_not_lifted"),
    ("negative", "—", "gated: G spanning heads / not a power of two", "tests/test_gated.py::test_group_not_dividing_head_dim_is_not_fused"),
    ("negative", "—", "gated: x/z dtypes differ, Gemma (1 + w), mutation before the quant",
     "tests/test_gated.py::test_mismatched_dtypes_gemma_weight_and_mutation_are_untouched"),
    ("negative", "—", "gated: non-contiguous heads", "tests/test_gated.py::test_non_contiguous_heads_are_not_fused"),
    ("negative", "—", "a 3-D value never gets a 2-D-only vLLM op, whatever the extractor",
     "tests/test_rows.py::test_a_3d_value_never_gets_a_2d_only_op"),
    ("negative", "—", "a site no op can run is named by explain (CK's norm + quant: at most 8192 columns)",
     "tests/test_explain.py::test_explain_names_what_the_op_that_would_run_it_requires"),
    ("faults", "—", "one of four sites unwritable: dropped, the other three land",
     "tests/test_faults.py::test_one_unwritable_site_of_four_is_dropped_and_the_other_three_land"),
    ("order", "—", "shuffled rule orders give the same graph", "tests/test_order.py::test_shuffled_rule_orders_extract_the_same_graph"),
]


def outcomes(test_ids: list[str]) -> dict[str, str]:
    """Outcome per test id (parametrized cases folded: all must pass)."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "r.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                        *sorted(set(test_ids))], cwd=ROOT, check=False, capture_output=True)
        tree = ET.parse(xml)
    result: dict[str, str] = {}
    for case in tree.iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        name = case.get("name", "").split("[")[0]
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed"
            elif child.tag == "skipped":
                status = "xfail" if "xfail" in (child.get("type", "") + child.get("message", "")) else "skipped"
        key = f"{path}::{name}"
        worst = {"failed": 3, "xfail": 2, "skipped": 1, "passed": 0}
        if worst[status] >= worst.get(result.get(key, "passed"), 0):
            result[key] = status
    return result


def main() -> int:
    got = outcomes([t for *_, t in TABLE if t])
    lines = ["# Coverage of vLLM's ROCm/AITER fusion patterns", "",
             "Generated by `python -m benchmarks.coverage` from the outcomes of the tests named below "
             "(pattern classes: `shared/reference/vllm-facts.md` §1.2).", "",
             "| pattern | vLLM class | variant | test | status |", "|---|---|---|---|---|"]
    for pattern, cls, variant, test in TABLE:
        status = got.get(test, "not run") if test else "no test"
        lines.append(f"| {pattern} | {cls} | {variant} | {f'`{test}`' if test else '—'} | {status} |")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
