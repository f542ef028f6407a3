"""Real object stores on loopback for the tests: moto's S3 server and Microsoft's Azurite.

Why real servers: delta-rs (object_store), pyarrow's filesystems and Spark tasks all speak
HTTP to the store; only a server that answers like S3 / Azure Blob shows that commits,
conditional puts, listings and deletes really work. Both are installed from the project's
own files (``moto[server]`` in the ``dev`` extra, Azurite from ``.ci/package.json`` by
``.ci/run``); a test skips, naming what is missing, only when a server binary is absent.

Use the session-scoped fixtures ``moto_s3`` and ``azurite`` (import them into a test
module, or list this module in ``pytest_plugins``). Each gives a :class:`ObjectStore`:
its endpoint, the storage options for delta-rs/object_store (also understood by
:func:`pipelines.lake.location.lake_location`) and :meth:`ObjectStore.lake_uri` for a
fresh lake URI per test.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUCKET = "offsetlake-tests"
#: Azurite's documented development account and key (public; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")


@dataclass
class ObjectStore:
    """A running store: ``scheme`` (``s3`` or ``az``), ``endpoint``, ``storage_options``."""

    name: str
    scheme: str
    endpoint: str
    storage_options: dict[str, str] = field(repr=False)

    def lake_uri(self, label: str = "lake") -> str:
        """A lake URI no other test uses (the server lives for the whole session)."""
        return f"{self.scheme}://{BUCKET}/{label}-{uuid.uuid4().hex[:10]}"

    def env(self) -> dict[str, str]:
        """The storage options as the ``OFFSETLAKE_STORAGE_OPTIONS`` environment variable:
        how a subprocess gets them without putting them on its command line."""
        return {"OFFSETLAKE_STORAGE_OPTIONS": json.dumps(self.storage_options)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def _stop(proc: subprocess.Popen) -> None:
    """Both servers keep everything in memory: nothing to flush, so no graceful shutdown
    (moto's took ~10 s to honour SIGTERM)."""
    proc.kill()
    proc.wait(timeout=10)


@contextlib.contextmanager
def moto_server() -> Iterator[ObjectStore]:
    """moto's standalone S3 server (``python -m moto.server``) on a free loopback port, with
    one bucket; stopped on exit. Also used by benchmarks/object_store.py."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, proc, "moto's S3 server")
        endpoint = f"http://127.0.0.1:{port}"
        options = {"AWS_ACCESS_KEY_ID": "offsetlake-test", "AWS_SECRET_ACCESS_KEY": "offsetlake-test",
                   "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true",
                   "aws_conditional_put": "etag"}
        import pyarrow.fs as pafs

        pafs.S3FileSystem(access_key="offsetlake-test", secret_key="offsetlake-test",
                          region="us-east-1", endpoint_override=f"127.0.0.1:{port}", scheme="http",
                          allow_bucket_creation=True).create_dir(BUCKET)
        yield ObjectStore("moto-s3", "s3", endpoint, options)
    finally:
        _stop(proc)


def moto_installed() -> bool:
    return importlib.util.find_spec("moto") is not None and importlib.util.find_spec("flask") is not None


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[ObjectStore]:
    """moto's S3 server for the whole test session (see :func:`moto_server`)."""
    if not moto_installed():
        pytest.skip("moto's server is not installed: pip install 'moto[server]' (the dev extra)")
    with moto_server() as store:
        yield store


def azurite_binary() -> str | None:
    """``azurite-blob`` from ``$OFFSETLAKE_AZURITE``, ``.ci/node_modules`` (``npm ci`` in
    ``.ci/``), ``./node_modules`` or PATH."""
    for candidate in (os.environ.get("OFFSETLAKE_AZURITE"),
                      REPO / ".ci" / "node_modules" / ".bin" / "azurite-blob",
                      REPO / "node_modules" / ".bin" / "azurite-blob"):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    return shutil.which("azurite-blob")


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    """Azurite's Blob service (in-memory) on a free loopback port, path-style account URL."""
    binary = azurite_binary()
    if binary is None:
        pytest.skip("Azurite is not installed: run `npm ci` in .ci/ (bash .ci/run does) or set "
                    "OFFSETLAKE_AZURITE to an azurite-blob binary")
    port = free_port()
    workdir = tmp_path_factory.mktemp("azurite")  # its cwd: where a debug log would go
    stderr = (workdir / "azurite.err").open("w")
    # --disableTelemetry: Azurite collects telemetry by default; offline it queued it in
    # $TMPDIR/Microsoft-AzureMonitor-*, a directory left per test session
    proc = subprocess.Popen([binary, "--inMemoryPersistence", "--blobHost", "127.0.0.1",
                             "--blobPort", str(port), "--skipApiVersionCheck", "--loose",
                             "--disableTelemetry"],
                            cwd=workdir, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        try:
            _wait_for_port(port, proc, "Azurite")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {(workdir / 'azurite.err').read_text()[-500:]}") from None
        endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        options = {"azure_storage_account_name": AZURITE_ACCOUNT,
                   "azure_storage_account_key": AZURITE_KEY,
                   "azure_storage_endpoint": endpoint, "azure_allow_http": "true"}
        import pyarrow.fs as pafs

        pafs.AzureFileSystem(account_name=AZURITE_ACCOUNT, account_key=AZURITE_KEY,
                             blob_storage_authority=f"127.0.0.1:{port}", blob_storage_scheme="http",
                             dfs_storage_authority=f"127.0.0.1:{port}", dfs_storage_scheme="http",
                             ).create_dir(BUCKET)
        yield ObjectStore("azurite", "az", endpoint, options)
    finally:
        _stop(proc)
        stderr.close()


__all__ = ["AZURITE_ACCOUNT", "AZURITE_KEY", "BUCKET", "ObjectStore", "azurite", "azurite_binary",
           "free_port", "moto_installed", "moto_s3", "moto_server"]
