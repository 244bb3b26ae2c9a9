"""Duplicate groups: exact pairs (same pixel digest) and near pairs (hash distance) joined by union-find.

Pure Python and NumPy on what the signals hold: keys, hashes, digests, splits, labels. Images are held in
the input CSV's order (`position`), so every choice below (a group's first member, the group numbers) is
the same on every run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from beam_pipeline.quality.pairs import hamming


class UnionFind:
    """Disjoint sets over 0..n-1; the root of a set is its smallest member (its first image)."""

    def __init__(self, n: int) -> None:
        self.parent = np.arange(n, dtype=np.int64)

    def find(self, i: int) -> int:
        """The root of i's set (path halving keeps later finds short)."""
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = int(parent[i])
        return i

    def union(self, i: int, j: int) -> None:
        """Joins the sets of i and j under the smaller root."""
        a, b = self.find(i), self.find(j)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def roots(self) -> np.ndarray:
        """The root of every member."""
        return np.array([self.find(i) for i in range(len(self.parent))], dtype=np.int64)


@dataclasses.dataclass(frozen=True)
class Images:
    """What the grouping needs of every stored image, in CSV order (index = position)."""

    keys: list[str]
    splits: list[str]
    labels: list[str]
    hashes: np.ndarray  # uint64 [N]
    digests: list[tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class Group:
    """One duplicate group: members in CSV order (positions), the first is the one the others compare to."""

    group: int
    members: list[int]
    exact: bool  # Every member has the first member's exact pixels.
    leak: bool  # Members in more than one split.
    conflict: bool  # Members carry more than one (non-empty) label.


def exact_edges(digests: list[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    """(first, other) positions of every image whose digest an earlier image has."""
    first: dict[tuple[int, int], int] = {}
    for position, digest in enumerate(digests):
        earlier = first.setdefault(digest, position)
        if earlier != position:
            yield earlier, position


def find_groups(images: Images, near_pairs: Iterable[tuple[int, int]]) -> list[Group]:
    """Groups of 2+ images joined by exact digests and the near pairs (positions); largest first, then by first."""
    n = len(images.keys)
    sets = UnionFind(n)
    for a, b in exact_edges(images.digests):
        sets.union(a, b)
    for a, b in near_pairs:
        sets.union(a, b)
    roots = sets.roots()
    counts = np.bincount(roots, minlength=n)
    in_groups = np.nonzero(counts[roots] >= 2)[0]
    members: dict[int, list[int]] = {}
    for position in in_groups.tolist():  # Ascending: each member list comes out in CSV order.
        members.setdefault(int(roots[position]), []).append(position)
    ordered = sorted(members.values(), key=lambda group: (-len(group), group[0]))
    groups = []
    for number, group in enumerate(ordered):
        labels = {images.labels[m] for m in group} - {""}
        groups.append(Group(group=number, members=group,
                            exact=all(images.digests[m] == images.digests[group[0]] for m in group),
                            leak=len({images.splits[m] for m in group}) > 1, conflict=len(labels) > 1))
    return groups


# A group this large (and over --max_group_share of the images) is likely a chain of single linkage (A near
# B near C ...) rather than copies of one picture: below it, a small dataset's ordinary groups would count.
MIN_CHAIN_SIZE = 10


def largest_set(n: int, edges: Iterable[tuple[int, int]]) -> int:
    """The size of the largest set that `edges` join among n images (1 when none)."""
    sets = UnionFind(n)
    for a, b in edges:
        sets.union(a, b)
    return int(np.bincount(sets.roots(), minlength=1).max()) if n else 0


def is_chain(size: int, n: int, max_share: float) -> bool:
    """Whether a group of `size` of n images is too large to trust as one picture's copies."""
    return size >= MIN_CHAIN_SIZE and size > max_share * n


def distances_to_first(images: Images, group: Group) -> list[int]:
    """Each member's hash distance to the group's first member."""
    members = np.array(group.members)
    return hamming(images.hashes[members], images.hashes[group.members[0]]).tolist()
