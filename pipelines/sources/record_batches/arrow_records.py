"""The records of many v2 batches decoded at once with numpy: the vectorized reader's core.

Why a module of its own: this is the one place that reads records sections (record length,
timestamp and offset deltas, key and value lengths, the header count), the vectorized twin of
the exact decoder's loop (:mod:`.exact_batch`), with every check it makes; the group layout
and the columns around it are :mod:`.arrow_decode`'s.

Round k decodes the k-th record of every batch still active, so a group of short batches
(nearly all of ``__consumer_offsets``) costs a few rounds. When only a few long batches are
left (a commit of many partitions), rounds would be one numpy pass per record: those go to
the exact decoder instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Rounds", "parse_records"]

_FEW_ROUNDS = 16  # after this many record rounds, stragglers go to the exact decoder...
_FEW_BATCHES = 16  # ...when fewer than this many batches are still active


def _varint(u: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Zig-zag varints at positions ``p``: (value, byte count, ok or None if all ok).

    Up to 9 bytes (63 bits: int64 arithmetic is exact, so Python and numpy agree); longer
    ones are flagged and their batch goes to the exact decoder.
    """
    b = u[p]
    raw = (b & 0x7F).astype(np.int64)
    nb = np.ones(p.shape, dtype=np.int64)
    idx = np.flatnonzero(b & 0x80)
    ok = None
    j = 1
    while idx.size:
        if j == 9:
            ok = np.ones(p.shape, dtype=bool)
            ok[idx] = False
            break
        b = u[p[idx] + j]
        raw[idx] |= (b & 0x7F).astype(np.int64) << (7 * j)
        nb[idx] += 1
        idx = idx[b >= 0x80]
        j += 1
    return (raw >> 1) ^ -(raw & 1), nb, ok


@dataclass(slots=True)
class Rounds:
    """Records decoded by the vector path, one entry per (round k, active batch)."""

    batch: list[np.ndarray] = field(default_factory=list)  # candidate index
    k: list[np.ndarray] = field(default_factory=list)  # record index within its batch
    off_delta: list[np.ndarray] = field(default_factory=list)
    ts_delta: list[np.ndarray] = field(default_factory=list)
    key_start: list[np.ndarray] = field(default_factory=list)
    key_len: list[np.ndarray] = field(default_factory=list)
    value_start: list[np.ndarray] = field(default_factory=list)
    value_len: list[np.ndarray] = field(default_factory=list)

    def add(self, batch: np.ndarray, k: np.ndarray, fields: list[np.ndarray]) -> None:
        """One chunk: ``fields`` as returned by :func:`_round` after ``good`` and ``re``."""
        self.batch.append(batch)
        self.k.append(k)
        for name, values in zip(("ts_delta", "off_delta", "key_start", "key_len",
                                 "value_start", "value_len"), fields, strict=True):
            getattr(self, name).append(values)


def _round(
    u: np.ndarray, p: np.ndarray, be: np.ndarray, last: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The records starting at ``p`` (each in a batch ending at ``be``; ``last``: the batch's
    last record): (good, record end, [ts_delta, off_delta, key start, key length, value start,
    value length]).

    Positions are clamped to the record's end, so garbage lengths never index outside the
    buffer; since positions only grow, "header count byte at record end - 1" proves every
    field lay inside the record.
    """
    rlen, nb, vok = _varint(u, p)
    rs = p + nb
    re = rs + rlen
    good = (rlen >= 6) & (re <= be)
    if vok is not None:
        good &= vok
    lim = np.where(good, re, p)
    q = np.minimum(rs + 1, lim)  # skip the record attributes byte
    ts_delta, nb, v = _varint(u, q)
    q = np.minimum(q + nb, lim)
    if v is not None:
        good &= v
    off_delta, nb, v = _varint(u, q)
    q = np.minimum(q + nb, lim)
    if v is not None:
        good &= v
    klen, nb, v = _varint(u, q)
    ks = q + nb
    q = np.minimum(ks + np.maximum(klen, 0), lim)
    if v is not None:
        good &= v
    vlen, nb, v = _varint(u, q)
    vs = q + nb
    q = np.minimum(vs + np.maximum(vlen, 0), lim)
    if v is not None:
        good &= v
    good &= (u[q] == 0) & (q + 1 == re) & (~last | (re == be))
    return good, re, [ts_delta, off_delta, ks, klen, vs, vlen]


def parse_records(
    u: np.ndarray, start: np.ndarray, end: np.ndarray, count: np.ndarray, ok: np.ndarray
) -> Rounds:
    """Decode the records of every batch with ``ok`` (records section ``[start, end)`` of
    ``u``); ``ok`` is cleared for the batches that fail a check, whose
    records already in the result are then to be dropped by the caller."""
    out = Rounds()
    cur = start.copy()
    act = np.flatnonzero(ok & (count > 0))
    k = 0
    while act.size:
        if k >= _FEW_ROUNDS and act.size < _FEW_BATCHES:
            ok[act] = False  # a few long batches: the exact loop is cheaper than rounds
            break
        last = count[act] == k + 1
        good, re, fields = _round(u, cur[act], end[act], last)
        if not good.all():
            ok[act[~good]] = False
            act, re, last = act[good], re[good], last[good]
            fields = [f[good] for f in fields]
        out.add(act, np.full(act.size, k, dtype=np.int64), fields)
        cur[act] = re
        act = act[~last]
        k += 1
    return out
