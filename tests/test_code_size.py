"""``benchmarks.code_size``: code lines leave out blank lines, comments and docstrings, nothing else."""

from __future__ import annotations

from benchmarks import code_size

SOURCE = '''"""Module docstring,
two lines."""
import os  # a comment

# a comment line


def f(x):
    """Docstring."""
    s = """a string value,
    not a docstring"""
    return (x +
            1)
'''


def test_counts_code_lines_only():
    assert code_size.count(SOURCE) == (13, 6)


def test_every_counted_file_exists_and_the_table_names_both_sides():
    text = code_size.table(None)
    assert "| eqsat | rules | `rewrites/lift.py` |" in text and "1372" in text and "567" in text


def test_the_committed_table_is_what_the_script_measures():
    """docs/code_size.md is ``python -m benchmarks.code_size --write``'s output for today's files."""
    assert (code_size.ROOT / "docs" / "code_size.md").read_text() == code_size.table(None)
