"""Pure-Python codec for ``__consumer_offsets`` records; knows nothing of Spark.

The formats live as data in ``schemas/records`` (see :mod:`pipelines.decode.formats`).
"""

from pipelines.decode.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from pipelines.decode.partitioning import java_string_hashcode, partition_for
from pipelines.decode.records import (
    CONTROL,
    LEGACY_LAYOUT,
    OK,
    PARSE_ERROR,
    STATUSES,
    TOMBSTONE,
    UNKNOWN_TYPE,
    UNKNOWN_VALUE_VERSION,
    DecodedRecord,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_record,
    encode_value,
)

__all__ = [
    "CONTROL", "LEGACY_LAYOUT", "OK", "PARSE_ERROR", "STATUSES", "TOMBSTONE", "UNKNOWN_TYPE",
    "UNKNOWN_VALUE_VERSION", "DecodedRecord", "decode_assignment", "decode_key", "decode_record",
    "decode_subscription", "decode_value", "encode_assignment", "encode_key", "encode_record",
    "encode_subscription", "encode_value", "java_string_hashcode", "partition_for",
]
