"""A PySpark Python Data Source that streams ``__consumer_offsets`` read_committed from Kafka.

Why a Python source and not Spark's ``format("kafka")``: the spark-sql-kafka JVM package comes
from Maven, which is unreachable in some environments (PLATFORM.md), and Spark's Kafka source
exposes neither ``isolation.level`` semantics we can rely on by default nor our raw schema. This
source reads with read_committed semantics so that aborted transactional offset commits never
reach the output and reading stops at the last stable offset (LSO); see spec section 2.4: only
under read_committed does "latest record per key" reproduce the coordinator.

How it reads (:mod:`pipelines.sources.kafka_fetch`): raw Fetch requests (``isolation_level=1``)
over kafka-python's connection manager; the response's record batches go to the vectorized
segment parser and read_committed is applied to them exactly as the Java consumer does
(aborted transactional batches dropped by producer id, control batches are markers). No Python
object per record, and the batch facts a consumer hides are at hand: against the in-process
fake broker the whole read runs at ~0.5M records/s, ~10x the KafkaConsumer loop it replaced
(``test_throughput_consumer_path_vs_fetch_path`` prints both).

Registered as ``offsetlake-kafka`` (:func:`register`). Streaming (micro-batch, including
``availableNow``) and batch reads. Rows follow :data:`pipelines.sources.raw.RAW_ARROW_SCHEMA`,
``source`` is ``"kafka"`` and ``source_position`` is ``-1``. By default the rows are exactly what
a Java read_committed consumer returns: data records only, the columns a consumer cannot see
(producer id, markers, codec, ...) null, ``is_control`` False. With
``include_batch_metadata=true`` the COMMIT/ABORT control records are emitted too (flagged
``is_control``, with ``control_type``, as ``offsetlake-segments`` does, for the audit trail) and
every row carries its batch's producer id/epoch, transactional flag, magic, codec, base offset
and CRC verdict.

Offsets kept in Spark's checkpoint: ``{"<partition>": <next offset to read>, ...}`` (string keys:
the offset travels as JSON). Offsets have gaps under read_committed (markers, aborted batches,
compaction), so a range ``[start, end)`` is read until the fetch *position* reaches ``end`` -
the last offsets before ``end`` may be markers or aborted batches that yield no data row.

Options (all strings, as Spark passes them):

=============================  ==============================================================
``bootstrap_servers``          required (alias ``kafka.bootstrap.servers``)
``topic``                      default ``__consumer_offsets`` (override for tests)
``cluster_id``                 value of the ``cluster_id`` column; default: the cluster id the
                               brokers report in Metadata (null on very old brokers)
``starting_offsets``           ``earliest`` (default), ``latest``, or JSON ``{"0": 42, ...}``
                               (``-2`` earliest, ``-1`` latest; unlisted partitions: earliest)
``max_records_per_batch``      default 500000; ``0`` = unlimited. An upper bound on the offsets
                               spanned by one micro-batch, spread fairly over partitions; the
                               row count is at most that (offset gaps hold no records)
``fail_on_data_loss``          default ``true``: raise when a checkpointed offset is no longer in
                               the log (or the log went backwards); ``false`` resumes at the
                               earliest offset and logs a warning
``connect_timeout_s``          default 10: how long to try the bootstrap servers
``read_timeout_s``             default 120: a partition read that makes no progress this long
                               raises instead of hanging
``arrow_batch_rows``           default 10000: rows per Arrow batch handed to Spark
``client_id``                  kafka-python ``client_id`` (default ``offsetlake-kafka-source``)
``request_timeout_ms``         kafka-python ``request_timeout_ms``
``include_batch_metadata``     default ``false``; ``true`` also emits COMMIT/ABORT control
                               records and fills the batch columns (see above)
``packed``                     default ``false``; ``true`` emits PACKED_ARROW_SCHEMA rows (one
                               per Arrow batch) instead of one row per record: what the
                               ingest job reads, several times cheaper to move through Spark
``kafka.<a.b.c>``              any kafka-python consumer setting ``a_b_c``, e.g.
                               ``kafka.security.protocol``, ``kafka.sasl.mechanism``,
                               ``kafka.sasl.plain.username``, ``kafka.ssl.cafile``; values are
                               coerced to the type of kafka-python's default. The Fetch path
                               honours ``fetch.max.bytes``, ``max.partition.fetch.bytes``,
                               ``fetch.max.wait.ms``, ``retry.backoff.ms`` and ``check.crcs``
=============================  ==============================================================

The source always sets ``isolation_level=read_committed``, ``enable_auto_commit=False``,
``group_id=None`` (it never joins a group or commits offsets) and ``allow_auto_create_topics=False``;
options that contradict these are rejected, as is ``kafka.api_version`` (skipping the bootstrap
version probe would let an unreachable cluster hang the driver instead of failing fast).

Errors the CLI can print as one line (:func:`explain_failure` digs them out of Spark's
``StreamingQueryException``): :class:`KafkaUnreachable`, :class:`KafkaTopicNotFound`,
:class:`KafkaReadTimeout`, :class:`KafkaDataLoss`, :class:`KafkaFetchError`,
:class:`KafkaSourceConfigError`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from kafka import KafkaConsumer
from kafka import errors as kafka_errors
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pipelines.kafka_options import KafkaOptionError, normalize, parse_bool
from pipelines.redaction import redact, redact_mapping
from pipelines.sources.batching import spread_budget
from pipelines.sources.raw import PACKED_ARROW_SCHEMA, RAW_ARROW_SCHEMA, pack

if TYPE_CHECKING:
    from pipelines.sources.kafka_fetch import KafkaWire

log = logging.getLogger(__name__)

SOURCE_NAME = "offsetlake-kafka"
NAME = SOURCE_NAME  # the spelling pipelines.ingest uses (as segment_source.NAME)
OFFSETS_TOPIC = "__consumer_offsets"
SOURCE_LABEL = "kafka"

DEFAULT_MAX_RECORDS_PER_BATCH = 500_000
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 120.0
DEFAULT_ARROW_BATCH_ROWS = 10_000
DEFAULT_CLIENT_ID = "offsetlake-kafka-source"

#: Kafka's ListOffsets sentinels, also accepted in a ``starting_offsets`` JSON object.
EARLIEST = -2
LATEST = -1

#: What Spark expects from ``read()``: RAW_ARROW_SCHEMA with Spark's microsecond timestamps
#: (``to_arrow_schema(from_arrow_schema(RAW_ARROW_SCHEMA), timezone="UTC")``; a test checks).
SPARK_ARROW_SCHEMA: pa.Schema = pa.schema(
    [f.with_type(pa.timestamp("us", tz="UTC")) if pa.types.is_timestamp(f.type) else f
     for f in RAW_ARROW_SCHEMA]
)

#: The DataFrame schema of this source.
SPARK_SCHEMA: StructType = from_arrow_schema(RAW_ARROW_SCHEMA)
PACKED_SPARK_SCHEMA: StructType = from_arrow_schema(PACKED_ARROW_SCHEMA)

Offsets = dict[str, int]


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class KafkaSourceError(RuntimeError):
    """Base of the errors this source raises on purpose (one-line messages)."""


class KafkaUnreachable(KafkaSourceError):
    """No broker answered within the connect timeout (or offsets could not be listed)."""


class KafkaTopicNotFound(KafkaSourceError):
    """The topic does not exist or is not visible to this principal."""


class KafkaReadTimeout(KafkaSourceError):
    """A partition read made no progress for ``read_timeout_s``."""


class KafkaDataLoss(KafkaSourceError):
    """Offsets to read are gone from the log (retention, DeleteRecords, truncation)."""


class KafkaFetchError(KafkaSourceError):
    """A Fetch failed for good: corrupt batches, or a broker error that retrying cannot fix."""


class KafkaSourceConfigError(KafkaSourceError, ValueError):
    """An option is missing, unknown or contradicts what the source must enforce."""


class KafkaAuthenticationFailed(KafkaSourceError):
    """A definite SASL or TLS refusal (bad credentials, mechanism not enabled, certificate
    not trusted, hostname mismatch): retrying cannot help."""


class KafkaNotAuthorized(KafkaSourceError):
    """Authenticated, but the ACLs do not allow describing or reading the topic."""


_ERROR_NAMES = ("KafkaUnreachable", "KafkaTopicNotFound", "KafkaReadTimeout", "KafkaDataLoss",
                "KafkaFetchError", "KafkaSourceConfigError", "KafkaAuthenticationFailed",
                "KafkaNotAuthorized")
_ERROR_LINE = re.compile(r"\b(" + "|".join(_ERROR_NAMES) + r"): ([^\n]+)")


def explain_failure(exc: BaseException) -> str | None:
    """One line ``"KafkaUnreachable: cannot reach ..."`` from an exception raised here, or from a
    Spark exception (e.g. ``StreamingQueryException``) whose text carries the Python traceback
    of one; None when the failure is something else. Why: Spark wraps driver-side source errors
    in a JVM exception with a multi-page trace; the CLI wants the cause only."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KafkaSourceError):
            return redact(f"{type(current).__name__}: {current}")
        texts = [str(current)]
        for attr in ("desc", "_desc", "stackTrace", "_stackTrace"):
            value = getattr(current, attr, None)
            if isinstance(value, str):
                texts.append(value)
        for text in texts:
            matches = _ERROR_LINE.findall(text)
            if matches:
                name, message = matches[-1]  # the innermost "raise" comes last in a traceback
                return redact(f"{name}: {message.strip()}")
        current = current.__cause__ or current.__context__
    return None


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------

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
#: Settings whose values are Python objects, not strings.
_OBJECT_VALUED = frozenset({
    "key_deserializer", "value_deserializer", "default_offset_commit_callback",
    "partition_assignment_strategy", "metric_reporters", "selector", "kafka_client",
    "ssl_context", "sasl_oauth_token_provider", "socket_options",
})

_KNOWN_OPTIONS = frozenset({
    "bootstrap_servers", "topic", "cluster_id", "starting_offsets", "max_records_per_batch",
    "fail_on_data_loss", "connect_timeout_s", "read_timeout_s", "arrow_batch_rows", "client_id",
    "request_timeout_ms", "include_batch_metadata", "path", "packed",
})


def _parse_bool(name: str, raw: str) -> bool:
    try:
        return parse_bool(name, raw)
    except KafkaOptionError as exc:
        raise KafkaSourceConfigError(str(exc)) from None


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
        """Parse Spark's string options (see the module docstring for the list)."""
        opts = {str(k).lower(): v for k, v in options.items()}
        bootstrap = opts.get("bootstrap_servers") or opts.get("kafka.bootstrap.servers")
        if not bootstrap:
            raise KafkaSourceConfigError("option bootstrap_servers is required (host:port,...)")
        kafka_settings: dict[str, Any] = {}
        for key, value in opts.items():
            if key.startswith("kafka."):
                if key == "kafka.bootstrap.servers":
                    continue
                kafka_settings[key[len("kafka."):].replace(".", "_")] = value
            elif key not in _KNOWN_OPTIONS:
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

        arrow_rows = number("arrow_batch_rows", DEFAULT_ARROW_BATCH_ROWS, int)
        return cls(
            bootstrap_servers=str(bootstrap),
            topic=opts.get("topic") or OFFSETS_TOPIC,
            cluster_id=opts.get("cluster_id") or None,
            starting_offsets=parse_starting_offsets(opts.get("starting_offsets") or "earliest"),
            max_records_per_batch=number("max_records_per_batch",
                                         DEFAULT_MAX_RECORDS_PER_BATCH, int),
            fail_on_data_loss=_parse_bool("fail_on_data_loss",
                                          str(opts.get("fail_on_data_loss") or "true")),
            connect_timeout_s=number("connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S, float),
            read_timeout_s=number("read_timeout_s", DEFAULT_READ_TIMEOUT_S, float),
            arrow_batch_rows=max(1, arrow_rows),
            kafka=client_config(kafka_settings),
            include_batch_metadata=_parse_bool(
                "include_batch_metadata", str(opts.get("include_batch_metadata") or "false")),
            packed=_parse_bool("packed", str(opts.get("packed") or "false")),
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


# --------------------------------------------------------------------------------------------
# Driver-side metadata client and the pure API for the CLI
# --------------------------------------------------------------------------------------------


class KafkaOffsetsClient:
    """Driver-side view of the topic: partitions, earliest offsets and LSOs.

    One wire client (:class:`pipelines.sources.kafka_fetch.KafkaWire`, never fetching) kept
    for the reader's lifetime, so each micro-batch costs one ListOffsets round trip instead of
    a new connection. :class:`KafkaUnreachable` after ``connect_timeout_s``."""

    def __init__(self, opts: SourceOptions) -> None:
        from pipelines.sources.kafka_fetch import KafkaWire  # kafka_fetch builds on this module

        self.opts = opts
        self._wire: KafkaWire = KafkaWire(opts)

    def __enter__(self) -> KafkaOffsetsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._wire.close()  # never raises: closing must not mask the real error

    @property
    def cluster_id(self) -> str | None:
        """Cluster id from the last Metadata response."""
        return self._wire.cluster_id

    def partitions(self) -> list[int]:
        found = self._wire.partitions(self.opts.topic)
        if not found:
            raise KafkaTopicNotFound(
                f"topic {self.opts.topic} not found on {self.opts.bootstrap_servers} "
                "(missing, or not authorized to describe it)")
        return found

    def _list(self, which: str, partitions: Sequence[int] | None) -> Offsets:
        parts = list(self.partitions() if partitions is None else partitions)
        if not parts:
            return {}
        timeout_ms = self._wire.request_timeout_ms
        try:
            found = self._wire.list_offsets(self.opts.topic, parts,
                                            EARLIEST if which == "earliest" else LATEST,
                                            timeout_ms)
        except kafka_errors.KafkaTimeoutError:
            raise KafkaUnreachable(
                f"cannot list {which} offsets of {self.opts.topic} partitions {parts} on "
                f"{self.opts.bootstrap_servers} within {timeout_ms / 1000:g}s "
                "(partition leaders unreachable?)") from None
        return {str(p): int(offset) for p, offset in sorted(found.items())}

    def earliest(self, partitions: Sequence[int] | None = None) -> Offsets:
        """Log start offsets."""
        return self._list("earliest", partitions)

    def stable_end(self, partitions: Sequence[int] | None = None) -> Offsets:
        """End offsets as a read_committed consumer sees them: ListOffsets(LATEST) with
        isolation_level=1 answers the last stable offset, not the high watermark."""
        return self._list("latest", partitions)


def describe_topic(bootstrap_servers: str, topic: str = OFFSETS_TOPIC, *,
                   timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                   **config: Any) -> dict[int, tuple[int, int]]:
    """``{partition: (earliest offset, last stable offset)}`` without Spark.

    ``config`` are kafka-python consumer settings (``security_protocol="SASL_SSL"``, ...).
    Raises :class:`KafkaUnreachable` within about ``timeout_s`` when no broker answers and
    :class:`KafkaTopicNotFound` when the topic is not there."""
    opts = SourceOptions(bootstrap_servers=bootstrap_servers, topic=topic,
                         connect_timeout_s=timeout_s,
                         kafka=client_config({"client_id": DEFAULT_CLIENT_ID, **config}))
    with KafkaOffsetsClient(opts) as client:
        parts = client.partitions()
        earliest = client.earliest(parts)
        stable = client.stable_end(parts)
    return {p: (earliest[str(p)], stable[str(p)]) for p in parts}


def check_access(options: Mapping[str, Any]) -> list[int]:
    """What the streaming query will need, checked on the driver before Spark starts it:
    options valid, brokers reachable, credentials and TLS accepted, the topic visible
    (DESCRIBE), its offsets listable and one partition readable (READ: an empty Fetch).

    Why: inside a running query the same failures surface as a JVM StreamingQueryException
    pages long (or, for a missing READ, only on the executors). Raises the source's named
    one-line errors (:class:`KafkaAuthenticationFailed`, :class:`KafkaNotAuthorized`,
    :class:`KafkaUnreachable`, :class:`KafkaTopicNotFound`, :class:`KafkaSourceConfigError`).
    Returns the partition ids."""
    opts = SourceOptions.from_options(options)
    with KafkaOffsetsClient(opts) as client:
        parts = client.partitions()
        earliest = client.earliest(parts)
        first = parts[0]
        future, _node = client._wire.fetch(opts.topic, first, earliest[str(first)], 1, 0)
        try:
            response = client._wire.wait(future)
        except kafka_errors.KafkaError as exc:  # READ is checked again by every task anyway
            log.debug("access check fetch of %s-%d failed: %r", opts.topic, first, exc)
            return parts
        for t in response.responses:
            for part in t.partitions:
                if part.error_code == kafka_errors.TopicAuthorizationFailedError.errno:
                    raise KafkaNotAuthorized(
                        f"topic {opts.topic}: not authorized to read it on "
                        f"{opts.bootstrap_servers} (the principal has DESCRIBE but needs READ "
                        "too)")
    return parts


# --------------------------------------------------------------------------------------------
# Planning (pure)
# --------------------------------------------------------------------------------------------


def plan_end_offsets(start: Mapping[str, int], available: Mapping[str, int],
                     limit: ReadLimit | None, *, fail_on_data_loss: bool = True) -> Offsets:
    """End offsets of the next micro-batch: ``available`` (LSOs) capped by ``limit``.

    ``start`` must name every partition of ``available``. Partitions missing from
    ``available`` keep their start. An LSO below the start means the log went backwards
    (truncation): :class:`KafkaDataLoss`, or keep the start when ``fail_on_data_loss`` is off.
    """
    end: Offsets = {}
    backlog: dict[str, int] = {}
    for p, s in start.items():
        e = available.get(p, s)
        if e < s:
            message = (f"partition {p}: last stable offset {e} is below the checkpointed "
                       f"offset {s} (log truncated?)")
            if fail_on_data_loss:
                raise KafkaDataLoss(message + "; set fail_on_data_loss=false to wait for it")
            log.warning("%s; waiting until it passes %d", message, s)
            e = s
        end[p] = e
        backlog[p] = e - s
    if isinstance(limit, ReadMinRows) and sum(backlog.values()) < limit.min_rows:
        return dict(start)
    if isinstance(limit, ReadMaxRows):
        grants = spread_budget(backlog, limit.max_rows)
        end = {p: start[p] + grants[p] for p in start}
    return end


# --------------------------------------------------------------------------------------------
# Reading (executor side)
# --------------------------------------------------------------------------------------------


def read_partition(opts: SourceOptions, partition: int, start: int, end: int, *,
                   cluster_id: str | None = None) -> Iterator[pa.RecordBatch]:
    """Records of ``[start, end)`` of one partition as read_committed sees them (with
    ``include_batch_metadata`` also the control records and batch facts), in RAW_ARROW_SCHEMA
    batches of at most ``arrow_batch_rows`` rows, over raw Fetch requests
    (:func:`pipelines.sources.kafka_fetch.fetch_partition`).

    Stops when the fetch *position* reaches ``end``, not when a record with offset ``end - 1``
    arrives: that offset may be a marker or part of an aborted batch. Records at or past
    ``end`` (the fetch returns whole batches) are dropped: they belong to the next
    micro-batch. No progress for ``read_timeout_s`` raises :class:`KafkaReadTimeout`."""
    from pipelines.sources.kafka_fetch import fetch_partition  # builds on this module

    return fetch_partition(opts, partition, start, end, cluster_id=cluster_id)


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Kafka partition's offset range ``[start, end)`` for one Spark task."""

    partition: int
    start: int
    end: int
    cluster_id: str | None = None


def _spark_batches(opts: SourceOptions, split: InputPartition) -> Iterator[pa.RecordBatch]:
    """``read_partition`` cast to the Arrow types Spark validates against (packed if asked)."""
    if not isinstance(split, KafkaInputPartition):
        raise TypeError(f"unexpected input partition {split!r}")
    batches = (batch.cast(SPARK_ARROW_SCHEMA) for batch in
               read_partition(opts, split.partition, split.start, split.end, cluster_id=split.cluster_id))
    yield from pack(batches) if opts.packed else batches


def _input_partitions(start: Mapping[str, int], end: Mapping[str, int],
                      cluster_id: str | None) -> list[KafkaInputPartition]:
    return [KafkaInputPartition(int(p), start[p], end[p], cluster_id)
            for p in sorted(end, key=int) if p in start and start[p] < end[p]]


# --------------------------------------------------------------------------------------------
# Readers and the data source
# --------------------------------------------------------------------------------------------


class _DriverMixin:
    """Lazily opened metadata client (created on the driver only; never pickled)."""

    opts: SourceOptions
    _client: KafkaOffsetsClient | None

    def _driver(self) -> KafkaOffsetsClient:
        if self._client is None:
            self._client = KafkaOffsetsClient(self.opts)
        return self._client

    def _cluster_id(self) -> str | None:
        return self.opts.cluster_id or self._driver().cluster_id

    def _close_driver(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _starting(self, partitions: Sequence[int]) -> Offsets:
        """Offsets named by ``starting_offsets`` for ``partitions``."""
        client = self._driver()
        spec = self.opts.starting_offsets
        if spec == "latest":
            return client.stable_end(partitions)
        earliest = client.earliest(partitions)
        if spec == "earliest":
            return earliest
        assert isinstance(spec, dict)
        latest = client.stable_end(partitions) if LATEST in spec.values() else {}
        out: Offsets = {}
        for p in partitions:
            wanted = spec.get(p, EARLIEST)
            key = str(p)
            out[key] = (earliest[key] if wanted == EARLIEST else latest[key]
                        if wanted == LATEST else wanted)
        return out


class KafkaStreamReader(_DriverMixin, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader: offsets ``{"partition": next offset}`` in Spark's checkpoint."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._client = None
        self._target: Offsets | None = None
        self._latest_seen: Offsets | None = None

    def initialOffset(self) -> Offsets:
        client = self._driver()
        offsets = self._starting(client.partitions())
        log.info("%s initial offsets (%s): %s", self.opts.topic,
                 self.opts.starting_offsets, offsets)
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_batch > 0:
            return ReadMaxRows(self.opts.max_records_per_batch)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the LSOs now: an availableNow run reads up to them and no further."""
        self._target = self._driver().stable_end()
        log.info("%s availableNow target offsets: %s", self.opts.topic, self._target)

    def _complete(self, start: Mapping[str, int], partitions: Sequence[str]) -> Offsets:
        """``start`` plus partitions it lacks (new ones) at their earliest offset."""
        full = {str(p): int(o) for p, o in start.items()}
        missing = [int(p) for p in partitions if p not in full]
        if missing:
            added = self._driver().earliest(missing)
            log.info("%s: new partitions %s start at %s", self.opts.topic, missing, added)
            full.update(added)
        return full

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> Offsets:
        if self._target is not None:
            available = dict(self._target)
        else:
            available = self._driver().stable_end()
            self._latest_seen = available
        if start is None:  # Spark 4.0/4.1 call this without arguments
            return available
        full = self._complete(start, list(available))
        self._check_log_start(full)
        gone = sorted(set(full) - set(available), key=int)
        if gone and self._target is None:
            message = f"{self.opts.topic}: partitions {gone} disappeared"
            if self.opts.fail_on_data_loss:
                raise KafkaDataLoss(message + "; set fail_on_data_loss=false to drop them")
            log.warning("%s; dropping them", message)
            full = {p: o for p, o in full.items() if p not in gone}
        end = plan_end_offsets(full, available, limit,
                               fail_on_data_loss=self.opts.fail_on_data_loss)
        log.info("%s micro-batch end offsets (%s): %s", self.opts.topic, limit, end)
        return end

    def _check_log_start(self, start: Mapping[str, int]) -> None:
        """A log start past the checkpoint: records lost to retention or a recreated topic.

        Fails (:class:`KafkaDataLoss`) unless ``fail_on_data_loss`` is off (``--allow-data-loss``),
        in which case reading resumes at the log start with a warning.
        """
        if not start:
            return
        earliest = self._driver().earliest([int(p) for p in start])
        lost = {p: (s, earliest[p]) for p, s in sorted(start.items(), key=lambda i: int(i[0]))
                if p in earliest and s < earliest[p]}
        if not lost:
            return
        where = ", ".join(f"partition {p}: checkpoint at {s}, log starts at {e}"
                          for p, (s, e) in lost.items())
        message = (f"{self.opts.topic}: records lost before they were ingested ({where}; "
                   "retention or a recreated topic)")
        if self.opts.fail_on_data_loss:
            raise KafkaDataLoss(message + "; rerun with --allow-data-loss (option "
                                "fail_on_data_loss=false) to continue from the log start")
        log.warning("%s; continuing from the log start", message)

    def reportLatestOffset(self) -> Offsets | None:
        return self._target or self._latest_seen

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        full = self._complete(start, list(end))
        return _input_partitions(full, end, self._cluster_id())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _spark_batches(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Advisory only (PLATFORM.md): positions live in Spark's checkpoint, not here."""
        log.debug("%s committed through %s", self.opts.topic, end)

    def stop(self) -> None:
        self._close_driver()


class KafkaBatchReader(_DriverMixin, DataSourceReader):
    """Batch read: ``starting_offsets`` (default earliest) up to the current LSOs."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._client = None

    def partitions(self) -> Sequence[InputPartition]:
        try:
            client = self._driver()
            parts = client.partitions()
            start = self._starting(parts)
            end = client.stable_end(parts)
            cluster_id = self._cluster_id()
        finally:
            self._close_driver()
        log.info("%s batch read: %s -> %s", self.opts.topic, start, end)
        return _input_partitions(start, end, cluster_id)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _spark_batches(self.opts, partition)


class KafkaConsumerOffsetsDataSource(DataSource):
    """``spark.readStream.format("offsetlake-kafka")``: ``__consumer_offsets`` read_committed."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _packed(self) -> bool:
        return str(self.options.get("packed", "false")).lower() == "true"

    def schema(self) -> StructType:
        return PACKED_SPARK_SCHEMA if self._packed() else SPARK_SCHEMA

    def _options(self, schema: StructType) -> SourceOptions:
        if schema != self.schema():
            raise KafkaSourceConfigError(
                f"{SOURCE_NAME} has a fixed schema (RAW_ARROW_SCHEMA); do not pass .schema()")
        return SourceOptions.from_options(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self._options(schema))

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(self._options(schema))


def register(spark: Any) -> None:
    """Make ``format("offsetlake-kafka")`` available in ``spark``."""
    spark.dataSource.register(KafkaConsumerOffsetsDataSource)
