"""The kernel catalog: a table, one row per op the e-graph knows by name, gathered from families.

A kernel module (``eqsat/kernels/families/<family>.py``, every module there) holds its
rows, how each vocabulary spells them (``SPELLINGS``), its rules (``RULES``) and its torch ops
(``OPS``, ``vllm_standins``); this module finds the modules and gathers their rows, adding each fused
row's Inductor twin (``eqsat.kernels.inductor``). ``eqsat.rewrites.kernels`` turns each fused row into
a fuse rule and an unlift rule, so adding a kernel is adding a module; nothing lists them by hand.

``Catalog`` is an immutable value passed explicitly; ``DEFAULT_CATALOG`` is the built-in table and
``Catalog.extend`` returns a new one (how a user declares a hypothetical kernel).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from types import ModuleType

from eqsat.core.fingerprint import stable
from eqsat.core.spec import KernelSpec
from eqsat.kernels.inductor import twins


def _families() -> tuple[ModuleType, ...]:
    from eqsat.kernels import families as package

    modules = (importlib.import_module(f"{package.__name__}.{m.name}")
               for m in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name))
    return tuple(modules)


FAMILIES = _families()
_ROWS = tuple(row for family in FAMILIES for row in family.ROWS)
BUILTIN: tuple[KernelSpec, ...] = (*_ROWS, *twins(_ROWS))


@dataclass(frozen=True)
class Catalog:
    """An immutable table of :class:`KernelSpec` rows, addressed by constructor name."""

    specs: tuple[KernelSpec, ...]

    def __post_init__(self) -> None:
        names = [s.name for s in self.specs]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"catalog has duplicate entries: {sorted(dupes)}")

    def __iter__(self) -> Iterator[KernelSpec]:
        return iter(self.specs)

    @cached_property
    def _by_name(self) -> dict[str, KernelSpec]:
        return {s.name: s for s in self.specs}

    @cached_property
    def _hash(self) -> int:  # the rule set is memoised per catalog: hash the rows once
        return hash(self.specs)

    def __hash__(self) -> int:
        return self._hash  # raises TypeError, and caches nothing, while a row holds an unhashable value

    def __reduce__(self) -> tuple[type[Catalog], tuple[tuple[KernelSpec, ...]]]:
        return Catalog, (self.specs,)  # str hashes differ between processes: recompute

    def __getitem__(self, name: str) -> KernelSpec:
        return self._by_name[name]

    def get(self, name: str) -> KernelSpec | None:
        return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def extend(self, specs: Iterable[KernelSpec]) -> Catalog:
        return Catalog(self.specs + tuple(specs))

    def fused(self) -> tuple[KernelSpec, ...]:
        return tuple(s for s in self.specs if s.is_fused)

    def fingerprint(self) -> str:
        """A description of every row, the same in every process (for cache keys)."""
        return self._fingerprint

    @cached_property
    def _fingerprint(self) -> str:  # each uuid() of a pass asks (Inductor: a few times a graph)
        return "\n".join(stable(s) for s in self.specs)


DEFAULT_CATALOG = Catalog(BUILTIN)
