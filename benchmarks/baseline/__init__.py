"""Peers the optimizer is measured against (``pattern_matcher``: vLLM's approach, Inductor's matcher)."""
