"""JSON for decoded records: bytes as base64 (Kafka's JSON converters do the same)."""

from __future__ import annotations

import base64
import json
from typing import Any


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


def dumps(value: Any) -> str:
    """``json.dumps(jsonable(value))`` compactly, without copying ``value`` first (the same
    text: decoded records have str keys only, and json writes tuples as lists)."""
    return _ENCODER.encode(value)
