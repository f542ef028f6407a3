"""Which ``__consumer_offsets`` partition owns a group: ``Utils.abs(hashCode) % n``."""

from __future__ import annotations

_MIN_INT = -(1 << 31)


def java_string_hashcode(text: str) -> int:
    """Java's ``String.hashCode`` over UTF-16 code units, with 32-bit signed wrap-around."""
    h = 0
    raw = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def partition_for(group_id: str, num_partitions: int = 50) -> int:
    """Kafka's group-to-partition rule; ``Utils.abs`` maps Integer.MIN_VALUE to 0."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    h = java_string_hashcode(group_id)
    return (0 if h == _MIN_INT else abs(h)) % num_partitions
