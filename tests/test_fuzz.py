"""The random-graph fuzzer (``benchmarks/fuzz.py``) on a fixed seed range, as a CI check.

``GRAPHS`` random graphs of 2 to ``MAX_OPS`` ops (norms, fused-add norms, group / per-token / static
fp8 quants in vLLM's, vLLM's native and eqsat's spellings, silu_and_mul, head reshapes, splits,
elementwise ops, opaque GEMMs; symbolic tokens or static shapes; profiles mi300x and h200; numerics
rounding and exact) each go through ``eqsat.optimize(strict=True)``. The test asserts that

- no graph raises an internal error or fails ``Graph.lint`` (strict: a site emit cannot write counts);
- no graph is wrong: on fresh inputs (5 and 13 tokens, magnitudes 1 and 1e-3) every output of the
  optimized graph matches the original's, bf16 bit-exact and fp8 q·scale within ``NATIVE_QUANT_TOL_STEPS`` (23/17) fp8 steps
  (``tests.test_rules.compare_outputs``), bit-exact under ``numerics="exact"``;
- the pass fused sites of several kernels (a pass that leaves every graph alone fails here).

A failure message names each failing seed, the command that reproduces it, and a shrunk program.
About 40-60 s on 2 cores (the optimized graph is a ``copy_graph`` of the traced one, not a second trace).
"""

from __future__ import annotations

from benchmarks.fuzz import fuzz

GRAPHS, SEED, MAX_OPS = 200, 20_000, 6


def test_random_graphs_optimize_correctly() -> None:
    summary = fuzz(GRAPHS, SEED, max_ops=MAX_OPS, shrink_first=2, retrace=False)
    failures = "\n\n".join(
        f"seed {out.seed}: {out.status} at {out.stage} ({prog.reproduce()})\n{out.message}\n"
        + (small or prog).source()
        for out, prog, small in summary.failures[:5])
    assert summary.errors == 0 and summary.wrong == 0, f"{summary.table()}\n\n{failures}"
    assert summary.generated >= 0.95 * GRAPHS, summary.skip_reasons
    assert summary.fused_sites >= 25 and len(summary.kernels) >= 4, summary.table()
