"""Packed source cells (one Arrow IPC stream per raw batch): what goes in comes out, smaller.

Why: the ingest job's sources hand Spark packed cells; Spark's JVM copies them several
times between the source's Python worker and the decoding one, so their bodies are
LZ4-compressed (``raw.PACKED_COMPRESSION``). Compression must never change a record.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.demo import generate_cluster
from pipelines.sources.raw import (
    PACKED_ARROW_SCHEMA,
    PACKED_COLUMN,
    PACKED_COMPRESSION,
    RAW_ARROW_SCHEMA,
    pack,
    unpacked,
)
from pipelines.sources.record_batches.arrow_reader import read_segments_arrow
from pipelines.sources.segments.files import find_segments


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A generated history with every codec, so cells hold compressed and plain batches' rows."""
    root = tmp_path_factory.mktemp("packed-demo")
    generate_cluster(root, num_partitions=3, scale=2, seed=5, compression=("none", "zstd", "lz4", "snappy", "gzip"))
    return root


def _raw_batches(root: Path) -> list[pa.RecordBatch]:
    return [b for plog in find_segments(root) for b in read_segments_arrow(plog.segments) if b.num_rows]


def _plain_ipc_size(batch: pa.RecordBatch) -> int:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().size


def _assert_round_trip(batches: list[pa.RecordBatch]) -> None:
    assert batches, "no records read"
    cells = list(pack(batches))
    assert len(cells) == len(batches)
    for cell in cells:
        assert cell.schema.equals(PACKED_ARROW_SCHEMA) and cell.num_rows == 1
    back = unpacked(pa.Table.from_batches(cells))
    assert back.schema.equals(RAW_ARROW_SCHEMA)
    assert back.equals(pa.Table.from_batches(batches, schema=RAW_ARROW_SCHEMA))


def test_packed_cells_unpack_to_exactly_the_generated_records(generated: Path) -> None:
    _assert_round_trip(_raw_batches(generated))


def test_packed_cells_unpack_to_exactly_the_real_broker_records(public_corpus: Path, scenario_a: Path) -> None:
    for root in (public_corpus, scenario_a):
        _assert_round_trip(_raw_batches(root))


def test_packed_cells_are_compressed(generated: Path) -> None:
    """Each cell's body is LZ4: several times smaller than the same batch in plain IPC."""
    assert PACKED_COMPRESSION == "lz4"  # pyarrow's wheels always carry LZ4
    batches = [b for b in _raw_batches(generated) if b.num_rows >= 1000]
    assert batches
    for batch in batches:
        (cell,) = list(pack([batch]))
        size = len(cell.column(PACKED_COLUMN)[0].as_py())
        assert size * 3 < _plain_ipc_size(batch), (size, _plain_ipc_size(batch))


def test_unpacking_still_reads_uncompressed_cells(generated: Path) -> None:
    """Cells written before compression (an older job's, a replayed batch) read the same."""
    batches = _raw_batches(generated)[:3]
    cells = []
    for batch in batches:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        cells.append(pa.RecordBatch.from_arrays([pa.array([sink.getvalue().to_pybytes()], pa.binary())],
                                                schema=PACKED_ARROW_SCHEMA))
    assert unpacked(pa.Table.from_batches(cells)).equals(pa.Table.from_batches(batches, schema=RAW_ARROW_SCHEMA))
