"""The CLI's exit after a Spark command (pipelines.cli.run): the driver's accumulator server is
let go instead of waited for (its handler polls once a second), and nothing of it stays behind.
The whole path, a real ingest process ending with status 0 and nothing but its summary, is
tests/test_quiet.py::test_ingest_prints_only_its_summary."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

from pyspark.accumulators import _start_update_server

from pipelines.cli import _release_accumulator_server


def test_a_unix_socket_accumulator_server_is_released_and_its_socket_removed() -> None:
    # a short path: Unix socket paths are limited to ~100 bytes
    path = Path(tempfile.mkdtemp(prefix="ol-")) / "acc.sock"
    server = _start_update_server("token", is_unix_domain_sock=True, socket_path=str(path))
    try:
        assert path.exists()
        context = SimpleNamespace(_accumulatorServer=server)
        _release_accumulator_server(context)
        assert context._accumulatorServer is None  # SparkContext.stop skips its shutdown
        assert server.server_shutdown  # a connected handler stops at its next poll
        assert not path.exists()
    finally:
        server.shutdown()
        server.server_close()
        os.rmdir(path.parent)


def test_a_tcp_accumulator_server_is_released() -> None:
    server = _start_update_server("token", is_unix_domain_sock=False)
    try:
        context = SimpleNamespace(_accumulatorServer=server)
        _release_accumulator_server(context)
        assert context._accumulatorServer is None and server.server_shutdown
    finally:
        server.shutdown()
        server.server_close()


def test_a_context_without_a_server_is_left_alone() -> None:
    context = SimpleNamespace(_accumulatorServer=None)
    _release_accumulator_server(context)
    assert context._accumulatorServer is None
