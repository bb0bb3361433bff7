"""Calibration rows read off the device probes' logs: the lines a kernel has only inside a compiled block.

    python -m benchmarks.probe_tables --card h100

The copy and pad Inductor writes in gpt-oss's block in vLLM's ops, Inductor's dynamic add + norm + pad, and
Qwen3-Next's gated norm + group quant over flat rows and over heads are timed where they run: by the profiler
inside the compiled block (``benchmarks/gpu/probe_block_kernels.py``) or a dynamic compile of the chain alone
(``benchmarks/gpu/probe_dynamic_twin.py``). This reads those logs (``benchmarks/results/probe_*_<card>.log``)
into the three tables ``eqsat calibrate`` fits, ``<card>_calibration_hinted.csv`` / ``_dynamic_pad.csv`` /
``_heads.csv``:

- ``hinted``: the copy (``copy``) and pad (``aten:aten.constant_pad_nd.default``) per size, from the block's
  compile first run at M = 8192 (no size past its hint); their ``@dynamic`` lines from fresh compiles first
  run at M = 8, every compile's draw.
- ``dynamic_pad``: ``inductor:add_rms_pad@dynamic``, the dynamic column (first run M = 8) of the chain's probe.
- ``heads``: ``@flat`` (Inductor's two kernels) and ``@heads`` (the one over the (tokens, 32, 128) view) per
  size from the block compiled first at M = 8192 (each compile's chain) and from the chain probe's
  first-run-8192 columns; their ``@dynamic`` lines from its first-run-8 columns at M >= 64. M is the flat
  rows, tokens x 32.

Bytes are each call's traffic at the model's widths (N = 2880 padded to 3072; Qwen3-Next's 32 heads of 128), as
the cost model prices it: the catalog row's ``traffic`` (the copy: the slice read and written, as
``RooflineCost`` prices it).
Which log holds what is ``LOGS``; a log missing a row it should hold is an error, not a shorter table.
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

import torch

from eqsat.core.spec import Operand
from eqsat.kernels.catalog import DEFAULT_CATALOG

RESULTS = Path("benchmarks/results")
HEADER = ("key", "M", "N", "G", "dtype", "device", "us", "bytes", "launches", "check")
PAD_KERNEL, COPY_KERNEL = "triton_poi_fused_constant_pad_nd_0", "triton_poi_fused_rocm_unquantized_gemm_0"
PAD_KEY, COPY_KEY = "aten:aten.constant_pad_nd.default", "copy"
N, MULT = 2880, 256  # gpt-oss's hidden size, padded to a multiple of 256 for its MoE
PAD = -N % MULT
HEADS, HEAD_DIM = 32, 128  # Qwen3-Next's gated norm: one row per head
LOGS = {  # what each table reads, {card} the card's tag
    "first8192": "probe_gptoss_vllm_first8192_{card}.log",
    "compiles": "probe_gptoss_vllm_compiles_{card}.log",
    "dynamic_pad": "probe_dynamic_twin_add_rms_pad_{card}.log",
    "qwen_block": "probe_qwen3next_{card}.log",
    "qwen_chain": "probe_dynamic_hints_qwen_{card}.log",
}
Row = tuple[str, int, int, int, str, str, str, int, int, str]


def block_kernels(text: str) -> dict[tuple[str, int, int], dict[str, float]]:
    """``probe_block_kernels.py``'s log: (variant, compile, M) -> {kernel: µs per forward}."""
    out: dict[tuple[str, int, int], dict[str, float]] = {}
    current: dict[str, float] | None = None
    for line in text.splitlines():
        if m := re.match(r"== \S+ / (\S+) / (?:compile (\d+) / )?M=(\d+):", line):
            current = out.setdefault((m[1], int(m[2] or 0), int(m[3])), {})
        elif (m := re.match(r"\s+([\d.]+) µs\s+x\s*[\d.]+\s+(\S+)", line)) and current is not None:
            current[m[2]] = current.get(m[2], 0.0) + float(m[1])
    return out


def chains(text: str) -> dict[tuple[str, int], list[float]]:
    """``probe_block_kernels.py --chain``'s summary lines: (variant, M) -> the chain's µs in each compile."""
    return {(m[1], int(m[2])): [float(x) for x in m[3].split()]
            for m in re.finditer(r"^chain (\S+) M=(\d+): median [\d.]+ µs of \d+ compiles: (.*)$", text, re.M)}


def twin_columns(text: str) -> dict[str, dict[int, list[float]]]:
    """``probe_dynamic_twin.py``'s tables: chain -> M -> its columns' µs (static, then each hint's dynamic)."""
    out: dict[str, dict[int, list[float]]] = {}
    table: dict[int, list[float]] | None = None
    for line in text.splitlines():
        if m := re.match(r"(\w+): M \|", line):
            table = out.setdefault(m[1], {})
        elif (m := re.match(r"\s+(\d+) \|(.*)", line)) and table is not None:
            table[int(m[1])] = [float(x) for x in re.findall(r"([\d.]+|nan) \(\d\)", m[2])]
    return out


def row_bytes(key: str, **args: object) -> int:
    """The bytes the catalog row of calibration key ``key`` moves on ``args`` (its traffic)."""
    spec = next(s for s in DEFAULT_CATALOG if s.calibration_key == key)
    return int(spec.traffic(args).bytes)


def _bf16(*shape: int) -> Operand:
    return Operand(shape, 2)


def _row(key: str, m: int, n: int, g: int, card: str, us: float, nbytes: int, launches: int) -> Row:
    return key, m, n, g, "bf16", card, f"{us:.2f}", nbytes, launches, "ok"


def _kernel(got: dict[tuple[str, int, int], dict[str, float]], variant: str, kernel: str, log: str) -> list[tuple[int, float]]:
    rows = sorted((m, c, k[kernel]) for (v, c, m), k in got.items() if v == variant and kernel in k)
    if not rows:
        raise ValueError(f"{log}: no {kernel} in the {variant} forward")
    return [(m, us) for m, _, us in rows]


def hinted(first8192: str, compiles: str, card: str, names: tuple[str, str]) -> list[Row]:
    """The copy and pad rows: per size from the compile first run at 8192, @dynamic from those first run at 8."""
    per_size, spread = block_kernels(first8192), block_kernels(compiles)
    pad = lambda m: row_bytes(PAD_KEY, x=_bf16(m, N), p=PAD)  # noqa: E731
    copy = lambda m: m * N * 2 * 2  # noqa: E731 - the slice read and written
    rows = [_row(PAD_KEY, m, N, 0, card, us, pad(m), 1) for m, us in _kernel(per_size, "inductor", PAD_KERNEL, names[0])]
    for variant in ("eqsat", "always_fuse"):
        rows += [_row(COPY_KEY, m, N, 0, card, us, copy(m), 1) for m, us in _kernel(per_size, variant, COPY_KERNEL, names[0])]
    rows += [_row(COPY_KEY + "@dynamic", m, N, 0, card, us, copy(m), 1)
             for m, us in _kernel(spread, "eqsat", COPY_KERNEL, names[1])]
    rows += [_row(PAD_KEY + "@dynamic", m, N, 0, card, us, pad(m), 1)
             for m, us in _kernel(spread, "inductor", PAD_KERNEL, names[1])]
    return rows


def dynamic_pad(text: str, card: str, name: str) -> list[Row]:
    """``inductor:add_rms_pad@dynamic``: the chain probe's dynamic column (first run M = 8), 2 launches."""
    table = twin_columns(text).get("add_rms_pad")
    if not table:
        raise ValueError(f"{name}: no add_rms_pad table")
    return [_row("inductor:add_rms_pad@dynamic", m, N, 128, card, cols[1],
                 row_bytes("add_rms_pad", x=_bf16(m, N), r=_bf16(m, N), w=_bf16(N), eps=1e-5, mult=MULT), 2)
            for m, cols in sorted(table.items())]


def gated_bytes(rows: int) -> int:
    """The gated norm + group quant's boundary traffic over ``rows`` flat rows of 128 (the fused row's)."""
    return row_bytes("rms_gated_group_quant", x=_bf16(rows, HEAD_DIM), z=_bf16(rows, HEAD_DIM), w=_bf16(HEAD_DIM),
                     eps=1e-6, G=HEAD_DIM, dt=torch.float8_e4m3fn)


def heads(block: str, chain: str, card: str, names: tuple[str, str]) -> list[Row]:
    """The @flat and @heads rows (per size and @dynamic); M is tokens x 32 flat rows."""
    key = "inductor:rms_gated_group_quant@"
    per_compile, columns = chains(block), twin_columns(chain)
    rows: list[Row] = []
    for variant, form, launches in (("inductor", "flat", 2), ("eqsat", "heads", 1)):
        got = sorted((t, us) for (v, t), xs in per_compile.items() if v == variant for us in xs)
        if not got:
            raise ValueError(f"{names[0]}: no {variant} chain")
        rows += [_row(key + form, t * HEADS, HEAD_DIM, HEAD_DIM, card, us, gated_bytes(t * HEADS), launches)
                 for t, us in got]
    for probe, form, launches in (("qwen_gated_quant", "flat", 2), ("qwen_gated_3d", "heads", 1)):
        table = columns.get(probe)
        if not table:
            raise ValueError(f"{names[1]}: no {probe} table")
        for t, (_, first_largest, first_small, *_) in sorted(table.items()):
            rows.append(_row(key + form, t * HEADS, HEAD_DIM, HEAD_DIM, card, first_largest, gated_bytes(t * HEADS),
                             launches))
            if t >= 64:
                rows.append(_row(key + form + "@dynamic", t * HEADS, HEAD_DIM, HEAD_DIM, card, first_small,
                                 gated_bytes(t * HEADS), launches))
    return sorted(rows, key=lambda r: (r[0], r[1]))


def tables(card: str, results: Path = RESULTS) -> dict[str, list[Row]]:
    """The three tables for ``card`` from its probe logs: file name -> rows."""
    names = {k: v.format(card=card) for k, v in LOGS.items()}
    text = {k: (results / v).read_text() for k, v in names.items()}
    return {
        f"{card}_calibration_hinted.csv": hinted(text["first8192"], text["compiles"], card,
                                                 (names["first8192"], names["compiles"])),
        f"{card}_calibration_dynamic_pad.csv": dynamic_pad(text["dynamic_pad"], card, names["dynamic_pad"]),
        f"{card}_calibration_heads.csv": heads(text["qwen_block"], text["qwen_chain"], card,
                                               (names["qwen_block"], names["qwen_chain"])),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--card", default="h100", help="the logs' tag: benchmarks/results/probe_*_<card>.log")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    for name, rows in tables(args.card).items():
        with (args.out / name).open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(HEADER)
            w.writerows(rows)
        print(f"{args.out / name}: {len(rows)} rows")


if __name__ == "__main__":
    main()
