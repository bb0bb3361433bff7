"""The ``eqsat`` command line: ``eqsat calibrate TABLE --device h200 [--out P.json] [--plot P.png]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from extract import calibrate
from extract.cost import load_profile


def _calibrate(args: argparse.Namespace) -> int:
    base = load_profile(args.device)
    table = calibrate.read_table(args.table)
    profile = calibrate.fit(table, base)
    fitted = calibrate.evaluate(table, profile)
    print(f"{fitted.n} measurements, {len(profile.kernels)} kernel keys fitted on {base.name}")
    print(f"median relative error {fitted.median_rel_error:.1%}, max {fitted.max_rel_error:.1%}, "
          f"Spearman {fitted.spearman:.3f}")
    for key, k in sorted(profile.kernels.items()):
        print(f"  {key:32s} launch {k.launch_us:6.2f} us   bandwidth {k.bandwidth_gbps:8.0f} GB/s")
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(profile.to_json())
        print(f"profile written to {args.out}")
    if args.plot:
        calibrate.plot(table, profile, args.plot, f"{base.name}: predicted vs measured")
        print(f"plot written to {args.plot}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eqsat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate", help="fit a device profile to a table of measured kernel times")
    cal.add_argument("table", help="CSV: key,M,N,G,dtype,device,us,bytes,launches")
    cal.add_argument("--device", default="h200", help="base profile name or .json path (default h200)")
    cal.add_argument("--out", help="write the fitted profile here (JSON)")
    cal.add_argument("--plot", help="write a predicted-vs-measured plot here (PNG)")
    cal.set_defaults(func=_calibrate)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
