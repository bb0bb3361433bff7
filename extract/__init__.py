"""Extraction: pick one e-node per needed e-class of a frozen :class:`~extract.egraph.EGraph`.

``EXTRACTORS`` maps a name to an :class:`~extract.base.Extractor`; every result passes ``check``.
"""

from extract.base import check, dag_cost
from extract.greedy import greedy_dag, tree_greedy
from extract.ilp import ilp_extract

EXTRACTORS = {"greedy": greedy_dag, "ilp": ilp_extract, "tree": tree_greedy}

__all__ = ["EXTRACTORS", "check", "dag_cost", "greedy_dag", "ilp_extract", "tree_greedy"]
