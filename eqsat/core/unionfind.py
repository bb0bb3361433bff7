"""``UnionFind``: disjoint sets over hashable values (dims tied by ops, a graph's components, chains)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class UnionFind(Generic[T]):
    """``union(a, b)`` joins the sets of ``a`` and ``b`` (``a``'s root stays the root); ``find`` names a value's
    set by its root (a value never given is its own); ``classes`` lists the sets of the values given, each in
    the order they were first given, its root last if it was never given itself."""

    def __init__(self, values: Iterable[T] = ()) -> None:
        self.parent: dict[T, T] = {x: x for x in values}

    def add(self, x: T) -> None:
        self.parent.setdefault(x, x)

    def find(self, x: T) -> T:
        parent = self.parent
        root = parent.get(x, x)
        if root == x or parent.get(root, root) == root:  # a root, or one step below one: most calls
            return root
        while (up := parent.get(root, root)) != root:
            root = up
        while x != root:
            parent[x], x = root, parent.get(x, x)
        return root

    def union(self, a: T, b: T) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra

    def classes(self) -> list[list[T]]:
        groups: dict[T, list[T]] = {}
        for x in list(self.parent):
            groups.setdefault(self.find(x), []).append(x)
        for root, members in groups.items():
            if root not in members:
                members.append(root)
        return list(groups.values())
