"""Micro-batches Spark counts as done whose Delta commits have not landed yet.

Why: the driver commits batch N while the executors decode batch N+1, instead of the two
taking turns. Spark records N as done as soon as its ``foreachBatch`` returns, before N's
commits land; a crash in between would lose N (Spark does not replay a batch it recorded).
So N's parts (its history files' names and statistics, the rows the state needs; never a
setting or a secret) are kept in the checkpoint before Spark is told, and every run commits
what it finds kept before its query starts. The commits are idempotent (each carries the
batch's transaction id), so a batch kept and committed twice lands once.
"""

from __future__ import annotations

import os
import pickle
from datetime import datetime
from pathlib import Path

from pipelines.history.parts import HistoryPart
from pipelines.history.tables import no_cyclic_gc

_FORMAT = 1
_SUFFIX = ".batch"


def keep(directory: Path, batch_id: int, now: datetime, cells: list[bytes]) -> None:
    """Keep batch ``batch_id``'s pickled parts, durably and whole (written aside, synced,
    then renamed into place): a kept batch is either complete or absent."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"{batch_id:020d}{_SUFFIX}"
    aside = directory / f".{final.name}.{os.getpid()}.tmp"
    with open(aside, "wb") as out:
        pickle.dump((_FORMAT, batch_id, now, cells), out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()
        os.fsync(out.fileno())
    os.replace(aside, final)


def kept(directory: Path) -> list[tuple[int, datetime, list[HistoryPart]]]:
    """Every kept batch, in batch order: (batch id, its ingestion time, its parts)."""
    if not directory.is_dir():
        return []
    out = []
    for path in sorted(directory.glob(f"*{_SUFFIX}")):
        with open(path, "rb") as f:
            version, batch_id, now, cells = pickle.load(f)
        if version != _FORMAT:
            raise ValueError(f"{path}: a kept batch of format {version}, this offsetlake reads {_FORMAT}; "
                             "finish it with the offsetlake version that wrote it")
        out.append((batch_id, now, parts_of(cells)))
    return out


def drop(directory: Path, batch_id: int) -> None:
    """Forget a kept batch once its commits landed."""
    (directory / f"{batch_id:020d}{_SUFFIX}").unlink(missing_ok=True)


def parts_of(cells: list[bytes]) -> list[HistoryPart]:
    # the collector paused: the parts hold the batch's decoded group records
    with no_cyclic_gc():
        return [pickle.loads(cell) for cell in cells]
