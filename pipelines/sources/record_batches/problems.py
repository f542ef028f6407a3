"""What a reader reports instead of raising: a region of bytes it could not read as intended.

Why a module of its own: every reader (exact, vectorized, Kafka Fetch) and every caller
(ingest, the CLI, the Spark sources) exchange the same :class:`Problem`, and readers must
never die on bad bytes, so this is the one error currency of ``record_batches``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

__all__ = ["Problem", "log_problem"]


@dataclass(slots=True, frozen=True)
class Problem:
    """A region of a segment file (or Fetch response) that could not be read as intended."""

    path: str
    position: int  # byte position where the bad region starts
    length_skipped: int  # bytes not decoded as records (0: decoded but suspicious, e.g. CRC)
    reason: str


def log_problem(problem: Problem) -> None:
    """Log ``problem`` at WARNING: what a reader does when no caller collects its problems."""
    log.warning(
        "%s @%d: %s (%d bytes skipped)",
        problem.path,
        problem.position,
        problem.reason,
        problem.length_skipped,
    )
