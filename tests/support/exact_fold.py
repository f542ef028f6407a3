"""The exact per-record read_committed fold: the oracle the production Arrow fold is tested against.

Why here and not in ``pipelines``: production folds transactions once, vectorized, in
:mod:`pipelines.sources.record_batches.transactions`. This record-by-record version states the
rule (spec section 2.4) as plainly as possible so tests can check the Arrow fold against it on
real and generated logs; it is not a second production path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pipelines.sources.record_batches.exact_batch import Record

__all__ = ["FoldResult", "fold_transactions"]


@dataclass(slots=True)
class FoldResult:
    """What a read_committed consumer would see of one partition, plus what it hides.

    Control records are *not* in ``records`` (a consumer never returns them); they are kept in
    ``markers`` so callers can count them.
    """

    records: list[Record]  # non-transactional + committed transactional data, log order
    held_back: list[Record]  # data of transactions with no marker yet, log order
    aborted: list[Record]  # data of aborted transactions, log order
    markers: list[Record]  # control records, log order
    last_stable_offset: int  # first offset of the earliest open transaction, else end + 1

    @property
    def commit_markers(self) -> int:
        return sum(1 for m in self.markers if m.control_type == "COMMIT")

    @property
    def abort_markers(self) -> int:
        return sum(1 for m in self.markers if m.control_type == "ABORT")


def fold_transactions(
    records: Iterable[Record], *, stop_at_lso: bool = False, log_end_offset: int | None = None
) -> FoldResult:
    """Resolve transactions in ONE partition's records (log order), like a read_committed
    consumer: drop aborted data, keep committed data at its log position, hold back data whose
    producer has no marker yet.

    Transactions are keyed by producer id, as the broker's producer state is: a marker of any
    epoch ends the producer's open transaction. ``stop_at_lso=True`` also drops decided
    records at or after the last stable offset, which is exactly what a read_committed consumer
    returns (a streaming reader then resumes at ``last_stable_offset``). ``log_end_offset``
    overrides "last batch's last offset + 1" (0 for empty input).
    """
    out: list[Record | None] = []
    pending: dict[int, list[int]] = {}  # producer id -> indexes into out
    first_open: dict[int, int] = {}  # producer id -> offset of its open transaction's first record
    aborted_idx: list[int] = []
    markers: list[Record] = []
    end = 0
    for r in records:
        b = r[7]
        if b.last_offset + 1 > end:
            end = b.last_offset + 1
        if b.is_control:
            markers.append(r)
            # Only COMMIT/ABORT end a transaction; other control types (KRaft-only) do not.
            if r.control_type in ("COMMIT", "ABORT"):
                idx = pending.pop(b.producer_id, None)
                first_open.pop(b.producer_id, None)
                if idx and r.control_type == "ABORT":
                    aborted_idx.extend(idx)
            continue
        out.append(r)
        if b.is_transactional:
            pid = b.producer_id
            if pid not in pending:
                pending[pid] = []
                first_open[pid] = r.offset
            pending[pid].append(len(out) - 1)
    aborted = []
    for i in sorted(aborted_idx):
        aborted.append(out[i])
        out[i] = None
    held_back = []
    for i in sorted(i for idx in pending.values() for i in idx):
        held_back.append(out[i])
        out[i] = None
    if log_end_offset is not None:
        end = log_end_offset
    lso = min(first_open.values(), default=end)
    kept: list[Record] = [r for r in out if r is not None and (not stop_at_lso or r.offset < lso)]
    return FoldResult(kept, held_back, aborted, markers, lso)
