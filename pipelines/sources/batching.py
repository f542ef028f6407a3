"""Sharing a micro-batch's record budget fairly between partitions (used by every source)."""

from __future__ import annotations

import math
from collections.abc import Mapping


def spread_budget(backlog: Mapping[str, int], budget: int) -> dict[str, int]:
    """Split ``budget`` records over partitions fairly (water-filling): partitions with less
    backlog than an equal share get all of it, the rest is shared by the others. Never grants
    more than a partition's backlog nor more than ``budget`` in total; grants something to at
    least one partition whenever ``budget > 0`` and there is backlog (so batches progress)."""
    grants = {p: 0 for p in backlog}
    pending = sorted(((n, p) for p, n in backlog.items() if n > 0), key=lambda t: (t[0], t[1]))
    remaining = max(0, budget)
    for i, (need, p) in enumerate(pending):
        if remaining <= 0:
            break
        share = math.ceil(remaining / (len(pending) - i))
        grant = min(need, share)
        grants[p] = grant
        remaining -= grant
    return grants
