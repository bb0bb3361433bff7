"""The ``eqsat`` command line.

- ``eqsat calibrate TABLE --device h200 [--out P.json] [--plot P.png] [--name N --move-unmeasured]``: fit a
  device profile (on another card's table, moving the lines it does not measure);
- ``eqsat explain GRAPH [--inputs FILE.py:example_inputs] [--kernels FILE.py:KERNELS] [--discover]``:
  every place a catalog (or ``--kernels``) kernel could apply, chosen or why not; ``--discover`` ranks uncovered chains;
- ``eqsat check-equiv GRAPH GRAPH [--inputs FILE.py:example_inputs]``: exit 0 when every output is
  proven equal, 1 when one differs, 2 when one is only "not proven";
- ``eqsat save FILE.py:fn -o GRAPH.json [--inputs FILE.py:example_inputs]``: trace and save a graph.

A GRAPH is ``FILE.py:fn`` (traced on ``example_inputs()`` or ``--inputs``, with a symbolic token dim)
or ``GRAPH.json`` (from ``eqsat save``, ``eqsat.graphfile.save`` or an ``EQSAT_DUMP_DIR`` ``before.json``).
Saved graphs load after ``register_vllm_standins`` (the real ``vllm_ir`` ops when vLLM is installed,
stand-ins with its schemas otherwise); any other op loads as an opaque stand-in from the schemas and
output shapes the file carries, so a graph dumped inside vLLM loads anywhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from eqsat.cost import calibrate
from eqsat.cost.roofline import load_profile

if TYPE_CHECKING:
    import torch.fx as fx


def _calibrate(args: argparse.Namespace) -> int:
    base = load_profile(args.device)
    table = calibrate.read_table(*args.table)
    if args.keys:
        table = [m for m in table if {c.key for c in m.components} <= set(args.keys)]
        if not table:
            raise SystemExit(f"eqsat calibrate: no measurements of {', '.join(args.keys)}")
    profile = calibrate.fit(table, base)
    if args.move_unmeasured:
        profile, moved = calibrate.move_unmeasured(base, profile, {c.key for m in table for c in m.components})
        print(f"{len(moved.keys)} lines of {base.name} the table does not measure moved by the measured keys' "
              f"median bandwidth ratio: {moved.within_l2:.3f} within L2, {moved.past_l2:.3f} past it (and the "
              f"default bandwidth): {', '.join(moved.keys)}")
    profile = dataclasses.replace(profile, name=args.name or profile.name,
                                  description=profile.description if args.description is None else args.description)
    fitted = calibrate.evaluate(table, profile)
    print(f"{fitted.n} measurements, {len(profile.kernels)} kernel keys fitted on {base.name}")
    print(f"median relative error {fitted.median_rel_error:.1%}, max {fitted.max_rel_error:.1%}, "
          f"Spearman {fitted.spearman:.3f}")
    for key, k in sorted(profile.kernels.items()):
        for side, line in (("", k), ("  past L2", k.past_l2)):
            if line is not None:
                print(f"  {key + side:40s} launch {line.launch_us:6.2f} us   per row {line.row_us * 1e3:6.2f} ns"
                      f"   bandwidth {line.bandwidth_gbps:8.0f} GB/s")
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(profile.to_json())
        print(f"profile written to {args.out}")
    if args.plot:
        calibrate.plot(table, profile, args.plot, f"{base.name}: predicted vs measured")
        print(f"plot written to {args.plot}")
    return 0


def load_callable(spec: str) -> Callable[..., object]:
    """``"path/to/file.py:name"`` -> the object ``name`` defined in that file."""
    path, _, name = spec.rpartition(":")
    if not path or not name:
        raise SystemExit(f"expected FILE.py:NAME, got {spec!r}")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if module_spec is None or module_spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise SystemExit(f"{path} defines no {name!r}")
    return getattr(module, name)


def load_graph(spec: str, inputs_spec: str | None = None) -> fx.GraphModule:
    """``GRAPH.json`` -> the saved graph; ``FILE.py:fn`` -> ``fn`` traced on its example inputs."""
    if spec.endswith(".json"):
        from eqsat import graphfile
        from eqsat.kernels.torch_ops import register_vllm_standins

        register_vllm_standins()
        try:
            return graphfile.load(spec)
        except graphfile.GraphFileError as exc:
            raise SystemExit(f"eqsat: {exc}") from None
    from eqsat.fx.capture import trace_tokens

    inputs = load_callable(inputs_spec or f"{spec.rpartition(':')[0]}:example_inputs")()
    return trace_tokens(load_callable(spec), *inputs)


def _explain(args: argparse.Namespace) -> int:
    from eqsat.options import Options
    from eqsat.tools import explain

    options = Options(profile=args.profile, sizes=args.sizes)
    if args.kernels:
        options = dataclasses.replace(options, catalog=options.catalog.extend(load_callable(args.kernels)))
    gm = load_graph(args.function, args.inputs)
    sites = explain.explain(gm, options)
    chains = explain.discover(gm, options) if args.discover else []
    if args.json:
        print(json.dumps({"sites": json.loads(explain.as_json(sites)), "chains": json.loads(explain.as_json(chains))},
                         indent=2))
        return 0
    print(explain.table(sites) if sites else "no place where a catalog kernel could apply")
    for ch in chains:
        print(f"chain {' -> '.join(ch.ops)}: {ch.cost_us:.2f} us now, {ch.fused_us:.2f} us fused "
              f"(saves {ch.saving_us:.2f} us) at {', '.join(ch.source or ch.nodes)}")
    return 0


def _check_equiv(args: argparse.Namespace) -> int:
    from eqsat.tools.equiv import check_equiv

    inputs_spec = args.inputs
    if inputs_spec is None and not args.reference.endswith(".json"):
        inputs_spec = f"{args.reference.rpartition(':')[0]}:example_inputs"
    verdicts = check_equiv(load_graph(args.reference, inputs_spec), load_graph(args.candidate, inputs_spec),
                           numerics=args.numerics)
    if args.json:
        print(json.dumps([dataclasses.asdict(v) for v in verdicts], indent=2))
    else:
        for v in verdicts:
            print(f"output {v.output}: {v.status:10s} {v.detail}")
    statuses = {v.status for v in verdicts}
    return 1 if "different" in statuses else 2 if "not proven" in statuses else 0


def _save(args: argparse.Namespace) -> int:
    from eqsat import graphfile

    gm = load_graph(args.function, args.inputs)
    try:
        graphfile.save(gm, args.out)
    except graphfile.GraphFileError as exc:
        raise SystemExit(f"eqsat: {exc}") from None
    print(f"graph of {args.function} ({len(gm.graph.nodes)} nodes) saved to {args.out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eqsat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate", help="fit a device profile to a table of measured kernel times")
    cal.add_argument("table", nargs="+", help="CSVs: key,M,N,G,dtype,device,us,bytes,launches (M: the rows)")
    cal.add_argument("--keys", nargs="+", help="fit only these calibration keys (default: every key measured)")
    cal.add_argument("--device", default="h200", help="base profile name or .json path (default h200)")
    cal.add_argument("--out", help="write the fitted profile here (JSON)")
    cal.add_argument("--plot", help="write a predicted-vs-measured plot here (PNG)")
    cal.add_argument("--name", help="the fitted profile's name (default: the base's)")
    cal.add_argument("--description", help="the fitted profile's description (default: the base's)")
    cal.add_argument("--move-unmeasured", action="store_true",
                     help="a table of another card: the base's lines it does not measure are moved to that card "
                          "(bandwidths scaled by the measured keys' median ratio; eqsat.cost.calibrate.move_unmeasured)")
    cal.set_defaults(func=_calibrate)
    ex = sub.add_parser("explain", help="where each kernel could apply, chosen or not and why")
    ex.add_argument("function", help="FILE.py:function or GRAPH.json")
    ex.add_argument("--inputs", help="FILE.py:function returning example inputs (default: example_inputs)")
    ex.add_argument("--kernels", help="FILE.py:NAME, a list of hypothetical KernelSpec rows to add")
    ex.add_argument("--discover", action="store_true", help="also list fusible chains no kernel covers")
    ex.add_argument("--profile", default="mi300x")
    ex.add_argument("--sizes", type=int, default=256, help="the size bound to the token dim")
    ex.add_argument("--json", action="store_true")
    ex.set_defaults(func=_explain)
    eq = sub.add_parser("check-equiv", help="prove two functions compute the same thing, per output")
    eq.add_argument("reference", help="FILE.py:function or GRAPH.json")
    eq.add_argument("candidate", help="FILE.py:function or GRAPH.json")
    eq.add_argument("--inputs", help="FILE.py:function returning example inputs (default: the reference "
                                     "file's example_inputs; unused for saved graphs)")
    eq.add_argument("--numerics", choices=("exact", "rounding"), default="rounding")
    eq.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    eq.set_defaults(func=_check_equiv)
    sv = sub.add_parser("save", help="trace a function and save its graph as JSON")
    sv.add_argument("function", help="FILE.py:function (or GRAPH.json, to re-save)")
    sv.add_argument("-o", "--out", required=True, help="the GRAPH.json to write")
    sv.add_argument("--inputs", help="FILE.py:function returning example inputs (default: example_inputs)")
    sv.set_defaults(func=_save)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
