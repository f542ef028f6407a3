"""Parse ``kafka-dump-log.sh --offsets-decoder --print-data-log`` output (Kafka's own decoder).

Used by the golden tests as the reference every decoded field is compared with.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*")
_KV = re.compile(r"(\w+): (\S+)")
_RECORD = re.compile(r"^\| offset: (\d+) (CreateTime|LogAppendTime): (-?\d+) keySize: (-?\d+) valueSize: (-?\d+)")


@dataclass
class DumpBatch:
    fields: dict[str, str]
    records: list[DumpRecord] = field(default_factory=list)


@dataclass
class DumpRecord:
    partition: int
    offset: int
    timestamp: int
    key_size: int
    value_size: int
    key: dict[str, Any] | None  # {"type": "1", "data": {...}}
    payload: dict[str, Any] | None  # {"version": "3", "data": {...}}; None for <DELETE>
    control: str | None  # "COMMIT"/"ABORT" for transaction markers
    raw: str


def parse_dump(path: Path) -> list[DumpBatch]:
    partition = int(path.stem.rsplit("-", 1)[1])
    batches: list[DumpBatch] = []
    for line in path.read_text().splitlines():
        if line.startswith("baseOffset:"):
            batches.append(DumpBatch(dict(_KV.findall(line))))
        elif line.startswith("| offset:"):
            batches[-1].records.append(_parse_record(partition, line))
    return batches


def _parse_record(partition: int, line: str) -> DumpRecord:
    m = _RECORD.match(line)
    if m is None:
        raise ValueError(f"unparsed dump line: {line[:120]}")
    offset, _ttype, ts, ksize, vsize = m.groups()
    key = payload = control = None
    if " endTxnMarker: " in line:
        control = line.split(" endTxnMarker: ", 1)[1].split()[0]
    elif " key: " in line:
        rest = line.split(" key: ", 1)[1]
        key_text, payload_text = rest.split(" payload: ", 1)
        key = json.loads(key_text)
        payload = None if payload_text.strip() == "<DELETE>" else json.loads(payload_text)
    return DumpRecord(partition, int(offset), int(ts), int(ksize), int(vsize), key, payload, control, line)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def to_kafka_json(value: Any) -> Any:
    """Our decoded values in the shape Kafka's JSON converter prints (bytes as base64)."""
    if isinstance(value, dict):
        return {
            k: to_kafka_json(v) for k, v in value.items() if not k.startswith("_") and k != "version"
        }
    if isinstance(value, list):
        return [to_kafka_json(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    return value


def from_kafka_json(value: Any) -> Any:
    """Kafka's camelCase JSON with our snake_case field names."""
    if isinstance(value, dict):
        return {snake(k): from_kafka_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_kafka_json(v) for v in value]
    return value
