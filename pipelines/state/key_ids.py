"""Integer keys for vectorized joins and groupings over Arrow columns: each distinct key (a
tuple of column values) numbered, consistently across tables.

Why a module of its own: the commit audit (attribution, anomalies) and the ownership replay
(ownership_runs) number keys alike, and the replay sits below the audit's imports.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def key_ids(*columns: list[pa.ChunkedArray | pa.Array]) -> list[np.ndarray]:
    """One integer id per distinct key across tables: ``columns`` is, per table, its key
    columns; equal keys get equal ids in every table, numbered in order of first appearance.

    Column by column: each key column is dictionary-encoded across the tables and folded
    into the running id (previous id x distinct values + code), so no row's key is ever
    built as a joined string (1M commits: 4 string joins and a hash of the joined strings
    cost more than the rest of the audit's attribution). The ids are renumbered once at
    the end, and in between only when the product of the distinct counts nears 2**62."""
    sizes = [len(cols[0]) for cols in columns]
    ids: np.ndarray | None = None
    bound = 1  # every id so far is below it
    for i in range(len(columns[0])):
        parts = [cols[i] for cols in columns]
        codes, distinct = _codes(parts)
        if ids is None:
            ids, bound = codes, distinct
            continue
        if bound * distinct >= 1 << 62:
            ids = _renumber(ids)
            bound = int(ids.max()) + 1 if len(ids) else 1
        ids, bound = ids * distinct + codes, bound * distinct
    if len(columns[0]) > 1:
        ids = _renumber(ids)
    return list(np.split(ids, np.cumsum(sizes)[:-1]))


def _codes(parts: list[pa.ChunkedArray | pa.Array]) -> tuple[np.ndarray, int]:
    """Dictionary codes of one key column across tables (integers as int64, anything else as
    strings, nulls as one more value) and the number of distinct values."""
    if any(pa.types.is_dictionary(p.type) for p in parts):
        return _dictionary_codes(parts)
    target = pa.int64() if all(pa.types.is_integer(p.type) for p in parts) else pa.string()
    chunks = [pc.cast(c, target) for p in parts for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])]
    # chunk by chunk, one dictionary for all (the strings are never copied into one array)
    encoded = pc.dictionary_encode(pa.chunked_array(chunks, target), null_encoding="encode").chunks
    if not encoded:
        return np.zeros(0, np.int64), 1
    codes = np.concatenate([c.indices.to_numpy() for c in encoded]).astype(np.int64)
    return codes, max(1, *(len(c.dictionary) for c in encoded))


def _dictionary_codes(parts: list[pa.ChunkedArray | pa.Array]) -> tuple[np.ndarray, int]:
    """:func:`_codes` of string columns some of which are dictionaries already (a batch's
    commits as read back): their dictionaries are unified and their indices taken as they
    are, with only the plain parts encoded (7.8M commits' group ids were hashed again)."""
    chunks = [c if pa.types.is_dictionary(c.type) else pc.dictionary_encode(c.cast(pa.string()))
              for p in parts for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])]
    chunks = [c if c.type.index_type == pa.int32() and c.type.value_type == pa.string()
              else c.cast(pa.dictionary(pa.int32(), pa.string())) for c in chunks]
    if not chunks:
        return np.zeros(0, np.int64), 1
    unified = pa.chunked_array(chunks).unify_dictionaries().chunks
    nulls = len(unified[0].dictionary)  # the code of a null key
    codes = np.concatenate([pc.fill_null(c.indices, nulls).to_numpy() for c in unified]).astype(np.int64)
    return codes, nulls + 1


def _renumber(values: np.ndarray) -> np.ndarray:
    """``values`` as 0, 1, 2... in order of first appearance."""
    encoded = pc.dictionary_encode(pa.array(values))
    return encoded.indices.to_numpy().astype(np.int64)
