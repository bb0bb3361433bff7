"""Extraction: pick one e-node per needed e-class of a frozen :class:`~eqsat.core.egraph.EGraph`.

``EXTRACTORS`` maps a name to an :class:`~eqsat.extract.base.Extractor`; every result passes ``check``.
"""

from eqsat.extract.base import check, dag_cost
from eqsat.extract.greedy import greedy_dag, tree_greedy
from eqsat.extract.ilp import ilp_extract

EXTRACTORS = {"greedy": greedy_dag, "ilp": ilp_extract, "tree": tree_greedy}

__all__ = ["EXTRACTORS", "check", "dag_cost", "greedy_dag", "ilp_extract", "tree_greedy"]
