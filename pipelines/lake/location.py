"""Where a lake lives: a local directory or an object-store URI, and how to reach it.

Why one place: delta-rs wants a table URI plus ``storage_options`` (object_store's keys),
Spark tasks and maintenance want a filesystem for plain files, and neither may ever print
a credential. :func:`lake_location` turns ``--lake`` (a path, ``file://``, ``s3://``,
``s3a://``, ``abfss://``/``abfs://``/``az://``, ``gs://``) and the options (explicit ones
over the usual environment variables) into a :class:`LakeLocation`; its
:meth:`~LakeLocation.filesystem` is a pyarrow filesystem built from the *same* options, so
what delta-rs commits and what the tasks write are always the same objects.

URIs are joined as text (``posixpath``), never through :mod:`pathlib`, which would turn
``s3://bucket/lake`` into ``s3:/bucket/lake``.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

log = logging.getLogger(__name__)

#: URI scheme -> the store it names.
STORES = {"s3": "s3", "s3a": "s3", "az": "azure", "abfs": "azure", "abfss": "azure",
          "adl": "azure", "azure": "azure", "gs": "gcs", "gcs": "gcs"}
#: Environment variables read as storage options, per store (delta-rs/object_store's names).
ENV_PREFIXES = {"s3": ("AWS_",), "azure": ("AZURE_",), "gcs": ("GOOGLE_",)}
#: ``KEY=VALUE`` options given as one JSON object in this variable (the flag's env form).
OPTIONS_ENV = "OFFSETLAKE_STORAGE_OPTIONS"

#: S3 has no atomic rename: delta-rs commits a version safely with S3's conditional writes
#: (``If-None-Match: *``), set unless the user chose otherwise (their own conditional-put
#: setting, or unsafe renames for a single writer). delta-rs 1.x dropped the DynamoDB
#: locking provider (it logs an error and ignores it), so that key does not count as a choice.
S3_SAFE_DEFAULTS = {"aws_conditional_put": "etag"}
_S3_SAFETY_KEYS = ("aws_conditional_put", "conditional_put", "aws_s3_allow_unsafe_rename")

# Azurite's well-known development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")


class StorageOptionError(ValueError):
    """Bad storage options; the message names keys, never values."""


@dataclass(frozen=True)
class LakeLocation:
    """A lake root: ``uri`` (an absolute local path, or ``scheme://...`` without a trailing
    slash) and the storage options that reach it. ``repr``/``str`` never show the options."""

    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def __str__(self) -> str:
        return self.uri

    def __fspath__(self) -> str:  # lets local lakes go where a path is expected
        return str(self.local_path)

    @property
    def scheme(self) -> str:
        return urlsplit(self.uri).scheme if "://" in self.uri else "file"

    @property
    def store(self) -> str:
        """``local``, ``s3``, ``azure`` or ``gcs``."""
        return "local" if self.is_local else STORES[self.scheme]

    @property
    def is_local(self) -> bool:
        return "://" not in self.uri

    @property
    def local_path(self) -> Path:
        if not self.is_local:
            raise ValueError(f"{self.uri} is not a local path")
        return Path(self.uri)

    def join(self, *parts: str) -> str:
        """A URI (or local path) below the root."""
        if self.is_local:
            return os.path.join(self.uri, *parts)
        return posixpath.join(self.uri, *parts)

    def child(self, *parts: str) -> LakeLocation:
        return LakeLocation(self.join(*parts), self.storage_options)

    def delta_options(self) -> dict[str, str] | None:
        """``storage_options`` for delta-rs (None for a local lake)."""
        return None if self.is_local else dict(self.storage_options)

    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem for plain files of this lake (cached per process)."""
        if self.is_local:
            return pafs.LocalFileSystem()
        key = (self.store, _netloc(self.uri), tuple(sorted(self.storage_options.items())))
        with _FS_LOCK:
            fs = _FS_CACHE.get(key)
            if fs is None:
                fs = _make_filesystem(self)
                _FS_CACHE[key] = fs
        return fs

    def fs_path(self, uri: str | None = None) -> str:
        """The path of ``uri`` (default: the root) inside :meth:`filesystem`."""
        uri = self.uri if uri is None else uri
        if "://" not in uri:
            return os.path.abspath(uri)
        parts = urlsplit(uri)
        if parts.scheme == "file":
            return parts.path
        if STORES.get(parts.scheme) == "azure":
            container = parts.username or parts.hostname or ""
            return f"{container}{parts.path}".rstrip("/")
        return f"{parts.netloc}{parts.path}".rstrip("/")


_FS_CACHE: dict[tuple, pafs.FileSystem] = {}
_FS_LOCK = threading.Lock()


def _netloc(uri: str) -> str:
    return urlsplit(uri).netloc


def lake_location(lake: str | os.PathLike | LakeLocation,
                  storage_options: Mapping[str, str] | None = None,
                  environ: Mapping[str, str] | None = None) -> LakeLocation:
    """The lake at ``lake`` with its options: the store's environment variables
    (``AWS_*``, ``AZURE_*``, ``GOOGLE_*``), then ``OFFSETLAKE_STORAGE_OPTIONS`` (a JSON
    object), then ``storage_options`` (e.g. ``--storage-option``), later ones winning.
    S3 lakes get conditional-put commits unless a locking choice was made.
    """
    if isinstance(lake, LakeLocation):
        if not storage_options:
            return lake
        return lake_location(lake.uri, {**lake.storage_options, **storage_options}, environ)
    text = os.fspath(lake)
    if "://" not in text:
        return LakeLocation(os.path.abspath(text))
    parts = urlsplit(text)
    if parts.scheme == "file":
        return LakeLocation(os.path.abspath(parts.path or "/"))
    store = STORES.get(parts.scheme.lower())
    if store is None:
        raise StorageOptionError(
            f"unsupported lake URI scheme {parts.scheme!r}: use a local path, file://, s3://, "
            "abfss://, az:// or gs://")
    if not parts.netloc:
        raise StorageOptionError(f"lake URI {text!r} names no bucket or container")
    env = os.environ if environ is None else environ
    options: dict[str, str] = {k: v for k, v in env.items()
                               if k.startswith(ENV_PREFIXES[store])}
    options.update(options_from_env(env))
    options.update(storage_options or {})
    uri = f"{parts.scheme.lower()}://{parts.netloc}{parts.path}".rstrip("/")
    if store == "s3":
        if parts.scheme.lower() == "s3a":  # Hadoop's name; delta-rs and pyarrow say s3
            uri = "s3" + uri[3:]
        if not any(_get(options, k) is not None for k in _S3_SAFETY_KEYS):
            options.update(S3_SAFE_DEFAULTS)
        if (_get(options, "aws_s3_locking_provider") or "").lower() == "dynamodb":
            log.warning("AWS_S3_LOCKING_PROVIDER=dynamodb is not supported by delta-rs 1.x; "
                        "commits to %s use S3 conditional writes instead", uri)
    return LakeLocation(uri, options)


def options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``OFFSETLAKE_STORAGE_OPTIONS`` as a dict (a JSON object of strings)."""
    text = (os.environ if environ is None else environ).get(OPTIONS_ENV)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        raise StorageOptionError(f"{OPTIONS_ENV} is not a JSON object") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise StorageOptionError(f"{OPTIONS_ENV} is not a JSON object of KEY: VALUE")
    return {k: str(v) for k, v in value.items()}


def parse_options(pairs: list[str] | list[tuple[str, str]] | None) -> dict[str, str]:
    """``KEY=VALUE`` texts (or pairs) as a dict; errors name the key, never the value."""
    out: dict[str, str] = {}
    for item in pairs or ():
        if isinstance(item, tuple):
            key, value = item
        else:
            if "=" not in item:
                raise StorageOptionError("a storage option must be KEY=VALUE (no '=' found)")
            key, value = item.split("=", 1)
        key = key.strip()
        if not key:
            raise StorageOptionError("a storage option has an empty KEY")
        out[key] = value
    return out


def _get(options: Mapping[str, str], *names: str) -> str | None:
    """Case-insensitive look-up under any of object_store's aliases."""
    lowered = {k.lower(): v for k, v in options.items()}
    for name in names:
        if name in lowered:
            return lowered[name]
    return None


def _true(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def _split_endpoint(url: str) -> tuple[str | None, str]:
    """``http://host:port/x`` -> (``http``, ``host:port``); a bare ``host:port`` -> (None, it)."""
    if "://" in url:
        parts = urlsplit(url)
        return parts.scheme, parts.netloc
    return None, url.rstrip("/")


def _s3_filesystem(loc: LakeLocation) -> pafs.FileSystem:
    o = loc.storage_options
    kwargs: dict[str, Any] = {}
    key = _get(o, "aws_access_key_id", "access_key_id")
    secret = _get(o, "aws_secret_access_key", "secret_access_key")
    if key and secret:
        kwargs.update(access_key=key, secret_key=secret,
                      session_token=_get(o, "aws_session_token", "aws_token", "session_token",
                                         "token"))
    region = _get(o, "aws_region", "region", "aws_default_region", "default_region")
    if region:
        kwargs["region"] = region
    endpoint = _get(o, "aws_endpoint_url", "aws_endpoint", "endpoint_url", "endpoint",
                    "aws_endpoint_url_s3")
    if endpoint:
        scheme, authority = _split_endpoint(endpoint)
        kwargs["endpoint_override"] = authority
        if scheme:
            kwargs["scheme"] = scheme
    if _true(_get(o, "aws_allow_http", "allow_http")) and "scheme" not in kwargs:
        kwargs["scheme"] = "http"
    if _true(_get(o, "aws_virtual_hosted_style_request", "virtual_hosted_style_request")):
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)


def _azure_filesystem(loc: LakeLocation) -> pafs.FileSystem:
    o = loc.storage_options
    parts = urlsplit(loc.uri)
    emulator = _true(_get(o, "azure_storage_use_emulator", "use_emulator"))
    account = _get(o, "azure_storage_account_name", "account_name", "azure_storage_account")
    if not account and parts.hostname and parts.username:  # container@account.dfs.core...
        account = parts.hostname.split(".", 1)[0]
    if not account and emulator:
        account = AZURITE_ACCOUNT
    if not account:
        raise StorageOptionError(
            f"{loc.uri}: no Azure storage account (set AZURE_STORAGE_ACCOUNT_NAME or use "
            "abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH)")
    kwargs: dict[str, Any] = {"account_name": account}
    account_key = _get(o, "azure_storage_account_key", "account_key", "azure_storage_access_key",
                       "access_key", "azure_storage_master_key", "master_key")
    sas = _get(o, "azure_storage_sas_key", "azure_storage_sas_token", "sas_key", "sas_token")
    if account_key:
        kwargs["account_key"] = account_key
    elif sas:
        kwargs["sas_token"] = sas
    elif emulator:
        kwargs["account_key"] = AZURITE_KEY
    client_id = _get(o, "azure_client_id", "azure_storage_client_id", "client_id")
    client_secret = _get(o, "azure_client_secret", "azure_storage_client_secret", "client_secret")
    tenant = _get(o, "azure_tenant_id", "azure_storage_tenant_id", "tenant_id",
                  "azure_authority_id", "authority_id")
    if not account_key and not sas and client_id:
        kwargs.update(client_id=client_id, client_secret=client_secret, tenant_id=tenant)
    endpoint = _get(o, "azure_storage_endpoint", "azure_endpoint", "endpoint")
    if endpoint is None and emulator:
        endpoint = os.environ.get("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10000")
    if endpoint:
        scheme, authority = _split_endpoint(endpoint)
        scheme = scheme or ("http" if _true(_get(o, "azure_allow_http", "allow_http")) else "https")
        kwargs.update(blob_storage_authority=authority, dfs_storage_authority=authority,
                      blob_storage_scheme=scheme, dfs_storage_scheme=scheme)
    return pafs.AzureFileSystem(**kwargs)


def _gcs_filesystem(loc: LakeLocation) -> pafs.FileSystem:
    """Google Cloud Storage through Google's default credentials (GOOGLE_APPLICATION_CREDENTIALS)."""
    o = loc.storage_options
    kwargs: dict[str, Any] = {}
    endpoint = _get(o, "google_endpoint", "google_endpoint_url", "endpoint")
    if endpoint:
        scheme, authority = _split_endpoint(endpoint)
        kwargs["endpoint_override"] = authority
        if scheme:
            kwargs["scheme"] = scheme
    if _true(_get(o, "google_skip_signature", "skip_signature")):
        kwargs["anonymous"] = True
    return pafs.GcsFileSystem(**kwargs)


def _make_filesystem(loc: LakeLocation) -> pafs.FileSystem:
    return {"s3": _s3_filesystem, "azure": _azure_filesystem, "gcs": _gcs_filesystem}[loc.store](loc)


__all__ = ["OPTIONS_ENV", "S3_SAFE_DEFAULTS", "LakeLocation", "StorageOptionError",
           "lake_location", "options_from_env", "parse_options"]
