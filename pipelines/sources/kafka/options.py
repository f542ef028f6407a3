"""The Kafka source's options: parsing Spark's string options into :class:`SourceOptions`.

Why: the options are parsed once on the driver and travel to the executors inside the data
source, so they are a plain picklable value. kafka-python settings (``kafka.<a.b.c>``) go
through the project's one strict normaliser, :func:`pipelines.kafka_options.normalize`
(shared with ingest's spark-kafka path and the snapshot); this module adds only what the
source itself enforces (read_committed, no group, no commits, no auto-created topics).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pipelines.kafka_options import KafkaOptionError, normalize, parse_bool
from pipelines.redaction import redact_mapping
from pipelines.sources.batching import DEFAULT_MAX_RECORDS_PER_BATCH
from pipelines.sources.kafka.errors import KafkaSourceConfigError

log = logging.getLogger(__name__)

#: The topic this project reads: Kafka's internal offsets and group metadata log.
OFFSETS_TOPIC = "__consumer_offsets"
SOURCE_NAME = "offsetlake-kafka"
SOURCE_LABEL = "kafka"

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 120.0
DEFAULT_ARROW_BATCH_ROWS = 10_000
DEFAULT_CLIENT_ID = "offsetlake-kafka-source"

#: Kafka's ListOffsets sentinels, also accepted in a ``starting_offsets`` JSON object.
EARLIEST = -2
LATEST = -1

#: kafka-python settings this source owns: a different value would break its guarantees.
_FORCED: dict[str, Any] = {
    "isolation_level": "read_committed",
    "enable_auto_commit": False,
    "group_id": None,
    "allow_auto_create_topics": False,
}
#: Settings with a dedicated option, or that must not be set at all.
_OWNED: dict[str, str] = {
    "bootstrap_servers": "use the option bootstrap_servers",
    "bootstrap_timeout_ms": "use the option connect_timeout_s",
    "auto_offset_reset": "use the option fail_on_data_loss",
    "api_version": ("not supported: without the bootstrap version probe an unreachable cluster "
                    "hangs the driver instead of failing within connect_timeout_s"),
}
#: Options that are not SourceOptions fields of the same name.
_EXTRA_OPTIONS = frozenset({"client_id", "request_timeout_ms", "path"})


def client_config(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Validate and coerce kafka-python consumer settings with the one strict normaliser
    (:func:`pipelines.kafka_options.normalize`: known keys only, Java spellings, strict
    booleans, security.protocol / sasl.mechanism checked, SASL/SSL settings need a protocol
    using them).

    Raises :class:`KafkaSourceConfigError` for those, for keys this source owns, and for values
    that contradict read_committed / no-group / no-commit."""
    for key in settings:
        name = str(key).replace(".", "_")
        if name in _OWNED:
            raise KafkaSourceConfigError(f"kafka setting {name}: {_OWNED[name]}")
    from kafka import KafkaConsumer  # here: Spark's planner processes import this module

    try:
        normalized = normalize(settings, KafkaConsumer.DEFAULT_CONFIG)
    except KafkaOptionError as exc:
        raise KafkaSourceConfigError(str(exc)) from None
    out: dict[str, Any] = {}
    for key, coerced in normalized.items():
        value = settings.get(key, coerced)
        if key in _FORCED:
            if coerced != _FORCED[key] and not (key == "group_id" and coerced in ("", None)):
                raise KafkaSourceConfigError(
                    f"kafka setting {key}={value!r} is not allowed: the source always uses "
                    f"{key}={_FORCED[key]!r}")
            continue
        out[key] = coerced
    return out


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with secrets masked, for logs."""
    return redact_mapping(dict(config))


@dataclass(frozen=True)
class SourceOptions:
    """Parsed options. Picklable: it travels to executors inside the data source."""

    bootstrap_servers: str
    topic: str = OFFSETS_TOPIC
    cluster_id: str | None = None
    starting_offsets: str | dict[int, int] = "earliest"
    max_records_per_batch: int = DEFAULT_MAX_RECORDS_PER_BATCH
    fail_on_data_loss: bool = True
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    arrow_batch_rows: int = DEFAULT_ARROW_BATCH_ROWS
    kafka: dict[str, Any] = field(default_factory=dict)
    include_batch_metadata: bool = False
    packed: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse Spark's string options (listed in :mod:`pipelines.sources.kafka.spark_source`)."""
        opts = {str(k).lower(): v for k, v in options.items()}
        bootstrap = opts.get("bootstrap_servers") or opts.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise KafkaSourceConfigError("option bootstrap_servers is required (host:port,...)")
        kafka_settings: dict[str, Any] = {}
        known = {f.name for f in fields(cls) if f.name != "kafka"} | _EXTRA_OPTIONS
        for key, value in opts.items():
            if key.startswith("kafka."):
                if key == "kafka.bootstrap.servers":
                    continue
                kafka_settings[key[len("kafka."):].replace(".", "_")] = value
            elif key not in known:
                log.warning("%s: ignoring unknown option %r", SOURCE_NAME, key)
        kafka_settings.setdefault("client_id", opts.get("client_id") or DEFAULT_CLIENT_ID)
        if "request_timeout_ms" in opts:
            kafka_settings.setdefault("request_timeout_ms", opts["request_timeout_ms"])

        def number(name: str, default: float, kind: type[int] | type[float]) -> Any:
            raw = opts.get(name)
            if raw is None or str(raw).strip() == "":
                return default
            try:
                value = kind(raw)
            except ValueError:
                raise KafkaSourceConfigError(f"option {name}={raw!r}: expected a number") from None
            if value < 0:
                raise KafkaSourceConfigError(f"option {name}={raw!r}: must not be negative")
            return value

        def flag(name: str, default: str) -> bool:
            try:  # the one strict boolean parser, its error named as this source's
                return parse_bool(name, str(opts.get(name) or default))
            except KafkaOptionError as exc:
                raise KafkaSourceConfigError(str(exc)) from None

        arrow_rows = number("arrow_batch_rows", DEFAULT_ARROW_BATCH_ROWS, int)
        return cls(
            bootstrap_servers=str(bootstrap),
            topic=opts.get("topic") or OFFSETS_TOPIC,
            cluster_id=opts.get("cluster_id") or None,
            starting_offsets=parse_starting_offsets(opts.get("starting_offsets") or "earliest"),
            max_records_per_batch=number("max_records_per_batch",
                                         DEFAULT_MAX_RECORDS_PER_BATCH, int),
            fail_on_data_loss=flag("fail_on_data_loss", "true"),
            connect_timeout_s=number("connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S, float),
            read_timeout_s=number("read_timeout_s", DEFAULT_READ_TIMEOUT_S, float),
            arrow_batch_rows=max(1, arrow_rows),
            kafka=client_config(kafka_settings),
            include_batch_metadata=flag("include_batch_metadata", "false"),
            packed=flag("packed", "false"),
        )

    def consumer_config(self) -> dict[str, Any]:
        """The complete kafka-python configuration (user settings + enforced ones)."""
        config = dict(self.kafka)
        config.update(_FORCED)
        config["bootstrap_servers"] = self.bootstrap_servers
        config["bootstrap_timeout_ms"] = max(1, int(self.connect_timeout_s * 1000))
        config["auto_offset_reset"] = "none" if self.fail_on_data_loss else "earliest"
        config["key_deserializer"] = None
        config["value_deserializer"] = None
        return config


def parse_starting_offsets(raw: str) -> str | dict[int, int]:
    """``earliest`` / ``latest`` or a JSON object ``{"partition": offset}``."""
    value = raw.strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    try:
        parsed = json.loads(value)
        if not isinstance(parsed, dict):
            raise ValueError("not an object")
        return {int(k): int(v) for k, v in parsed.items()}
    except (ValueError, TypeError) as exc:
        raise KafkaSourceConfigError(
            f"option starting_offsets={raw!r}: expected earliest, latest or a JSON object "
            f'like {{"0": 42}} ({exc})') from None


