"""The kernel modules: each holds one family of rows, its spellings, rules and ops (``eqsat.kernels.catalog`` finds them)."""
