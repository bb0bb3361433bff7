"""The one configuration object: numerics contract, device profile, size binding, budgets, mode."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from eqsat.core.fingerprint import stable
from eqsat.core.rule import Rule
from eqsat.core.spec import Numerics
from eqsat.core.spelling import Vocabulary
from eqsat.cost.roofline import Profile
from eqsat.engine.saturate import Budgets
from eqsat.fx.symbolic import SymbolicPolicy
from eqsat.kernels.catalog import DEFAULT_CATALOG, Catalog
from eqsat.kernels.vocabularies import DEFAULT_VOCABULARIES
from eqsat.rewrites.schedule import default_rules, select

HOW_LONG_NOT_WHAT = frozenset({"dump_dir", "pause_gc", "repeats"})  # options left out of the fingerprint


@dataclass(frozen=True)
class Options:
    """How the optimizer runs.

    - ``numerics``: ``"rounding"`` (what vLLM ships: fused kernels that skip an intermediate
      rounding may replace the unfused ops) or ``"exact"`` (only bit-identical rewrites).
    - ``profile``: a device profile name in ``eqsat/cost/profiles`` (``mi300x``, ``mi355x``, ``h200``,
      ``h100``), ``"auto"`` (the profile of the GPU torch sees) or a ``.json`` path; its ``platform`` decides which kernels are candidates (those with an implementation there).
    - ``standalone_lifts``: write a lifted op that fuses nothing (``eqsat::rms_norm`` for a native
      norm) where no vocabulary of the graph spells it; off by default: Inductor's own code for the
      native chain moves the same bytes and fuses with its neighbours.
    - ``sizes``: the size bound to symbolic dims when costing: one int for every symbol, a mapping
      symbol -> int (``"*"`` is the default), or a tuple of ints (a compile range, costed at each).
    - ``extractor``: ``"greedy"`` (DAG greedy, default), ``"ilp"`` (exact) or ``"tree"``.
    - ``strict``: raise on internal failure instead of logging a warning and leaving the graph as is.
    - ``emit``: ``"if_faster"`` (default) rewrites only when the extraction is predicted faster (over a
      tuple of ``sizes``, one compiled graph run at each: faster weighed over them and slower at none
      beyond the profiles' error, re-extracted with the sizes it lost at weighed up where it is not:
      ``eqsat.decision.no_slower``);
      ``"always"`` writes the extraction back even when it is not (tests use it for round trips).
    - ``dump_dir``: write the graph before/after, the report and e-graph pictures per graph there
      (default: the ``EQSAT_DUMP_DIR`` environment variable; see ``eqsat.dump``).
    - ``symbolic``: where only a symbolic dim's example size can decide a kernel's contract (a last dim
      a multiple of G under ``torch.compile(dynamic=True)``): ``"guard"`` (default) decides on it and
      adds the condition as a guard when the rewrite is written, as Inductor's own specializations do;
      ``"prove"`` fuses only what the shape environment proves (``eqsat.fx.symbolic``).
    - ``pause_gc``: pause Python's cyclic garbage collector while the pass runs, as ``timeit`` does,
      and restore it after: a full collection walks every object of the compiling process, a sizeable share
      of the pass on a large graph. The pass's garbage goes at the
      next collection. Turn it off if another thread must not see collection paused meanwhile.
    - ``repeats``: saturate a component of the graph that repeats another (a model's layers) once, and
      copy its e-classes for the others (``eqsat.engine.repeats``): changes how long, not what.
    """

    numerics: Numerics = "rounding"
    profile: str | Profile = "mi300x"
    standalone_lifts: bool = False
    sizes: int | Mapping[str, int] | tuple[int, ...] = 256
    extractor: str = "greedy"
    budgets: Budgets = field(default_factory=Budgets)
    strict: bool = False
    emit: str = "if_faster"
    dump_dir: str | None = None  # default: $EQSAT_DUMP_DIR (see eqsat.dump)
    symbolic: SymbolicPolicy = "guard"
    pause_gc: bool = True
    repeats: bool = True
    rules: tuple[Rule, ...] | None = None  # default: every family's rules for the catalog

    def active_rules(self) -> tuple[Rule, ...]:
        """The rules that run: ``rules`` (or the default set), filtered by the numerics contract."""
        return select(self.rules, self.numerics) if self.rules is not None else default_rules(self.catalog, self.numerics)
    catalog: Catalog = DEFAULT_CATALOG
    vocabularies: tuple[Vocabulary, ...] = DEFAULT_VOCABULARIES

    def __deepcopy__(self, memo: dict[int, object]) -> Options:
        """Itself: a frozen value is shared, not copied (vLLM deep-copies its compile config, pass
        included; an engine's memos know a catalog and vocabularies by identity, ``eqsat.engine.engine``)."""
        return self

    def fingerprint(self) -> str:
        """Every option that can change what is written, the same in every process: all fields but
        ``HOW_LONG_NOT_WHAT`` and the catalog (fingerprinted on its own), the rules as those that run."""
        return stable(tuple((f.name, self.active_rules() if f.name == "rules" else getattr(self, f.name))
                            for f in fields(self) if f.name not in HOW_LONG_NOT_WHAT and f.name != "catalog"))
