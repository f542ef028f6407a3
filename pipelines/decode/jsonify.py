"""JSON for decoded records: bytes as base64 (Kafka's JSON converters do the same)."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _base64(value: Any) -> str:
    """``default`` for json.dumps: bytes as base64, exactly as :func:`jsonable` writes them."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


#: One encoder for every call: ``json.dumps`` with options builds a new one each time.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_base64)
#: msgspec writes the same text as ``_ENCODER`` for what decoded records hold (dicts with
#: str or int keys, lists, tuples, str, int, bool, None, bytes as standard base64), ~6x
#: faster: a group-heavy batch spent a quarter of its decoding on this text. Floats would
#: differ (``1e16`` for ``1e+16``), but no record format has a float field
#: (tests/test_jsonify.py holds both facts).
_FAST = msgspec.json.Encoder()


def dumps(value: Any) -> str:
    """``json.dumps(jsonable(value))`` compactly, without copying ``value`` first (the same
    text: decoded records have str keys only, and json writes tuples as lists). What msgspec
    refuses (a lone surrogate) is written by ``json``."""
    try:
        return _FAST.encode(value).decode("utf-8")
    except (TypeError, ValueError, OverflowError):
        return _ENCODER.encode(value)


_SPACED = json.JSONEncoder(ensure_ascii=False, default=_base64)


def dumps_spaced(value: Any) -> str:
    """``json.dumps(jsonable(value), ensure_ascii=False)``: :func:`dumps` with json's default
    separators (", " and ": "), which msgspec's formatter writes on one line at indent 0."""
    try:
        return msgspec.json.format(_FAST.encode(value), indent=0).decode("utf-8")
    except (TypeError, ValueError, OverflowError):
        return _SPACED.encode(value)
