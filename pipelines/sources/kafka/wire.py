"""The Kafka source's one client stack: Metadata, ListOffsets and Fetch over kafka-python.

Why not a ``KafkaConsumer``: it would fetch and decode records itself (~10-15k records/s per
task) and hide what ``__consumer_offsets`` auditing needs. :class:`KafkaWire` uses
kafka-python's connection manager (``KafkaNetClient``: bootstrap, TLS/SASL, ApiVersions
negotiation, metadata) and sends the requests itself; executors get Fetch responses as bytes
(:mod:`pipelines.sources.kafka.reader`), the driver partitions, log start offsets and last
stable offsets (:class:`KafkaOffsetsClient`). :func:`describe_topic` and
:func:`check_access` are the same client without Spark, for the CLI.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka import errors as kafka_errors
from kafka.future import Future
from kafka.net.compat import KafkaNetClient
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest

from pipelines.kafka_options import KafkaSecurityError, probe
from pipelines.sources.kafka.errors import (
    KafkaAuthenticationFailed,
    KafkaNotAuthorized,
    KafkaTopicNotFound,
    KafkaUnreachable,
)
from pipelines.sources.kafka.options import (
    DEFAULT_CLIENT_ID,
    DEFAULT_CONNECT_TIMEOUT_S,
    EARLIEST,
    LATEST,
    OFFSETS_TOPIC,
    SourceOptions,
    client_config,
    redacted,
)

log = logging.getLogger(__name__)

#: ``{"<partition>": offset}``: Spark's checkpoint offsets (JSON object keys are strings).
Offsets = dict[str, int]

#: Newest Fetch version used: v13 addresses topics by id only (KIP-516).
FETCH_MAX_VERSION = 12
#: isolation_level needs Fetch v4 / ListOffsets v2.
FETCH_MIN_VERSION = 4
LIST_OFFSETS_MIN_VERSION = 2
READ_COMMITTED = 1

#: Headroom of the response frame over the record bytes (headers, aborted-transaction lists).
_FRAME_HEADROOM = 1 << 20


#: kafka-python 3 raises KafkaTimeoutError("Unable to bootstrap ..."); 2.x raised
#: NoBrokersAvailable.
_BOOTSTRAP_ERRORS: tuple[type[BaseException], ...] = tuple(
    e for e in (getattr(kafka_errors, "NoBrokersAvailable", None), kafka_errors.KafkaTimeoutError)
    if e is not None)
_CONSUMER_DEFAULTS = KafkaConsumer.DEFAULT_CONFIG


class KafkaWire:
    """kafka-python's connection manager with its own IO thread, used directly.

    Why not a KafkaConsumer: it would fetch and decode records itself; here the driver needs
    Metadata and ListOffsets only, and executors need Fetch responses as bytes. Settings are
    the source's kafka-python consumer settings (TLS, SASL, timeouts, fetch sizes).
    Bootstrapping fails with :class:`KafkaUnreachable` after ``connect_timeout_s``.
    """

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        config = opts.consumer_config()

        def setting(key: str, default: Any = None) -> Any:
            return config.get(key, _CONSUMER_DEFAULTS.get(key, default))

        self.request_timeout_ms = int(setting("request_timeout_ms"))
        self.retry_backoff_s = float(setting("retry_backoff_ms")) / 1000
        self.fetch_max_bytes = int(setting("fetch_max_bytes"))
        self.fetch_max_wait_ms = int(setting("fetch_max_wait_ms"))
        self.partition_fetch_bytes = int(setting("max_partition_fetch_bytes"))
        self.check_crcs = bool(setting("check_crcs", True))
        # The frame guard must admit a full response (KafkaConsumer raises it the same way).
        config["receive_message_max_bytes"] = max(
            int(setting("receive_message_max_bytes", 0)),
            self.fetch_max_bytes + self.partition_fetch_bytes + _FRAME_HEADROOM)
        log.debug("opening kafka wire client: %s", redacted(config))
        self._client = KafkaNetClient(**config)
        self._manager = self._client._manager
        self._net = self._manager._net
        # kafka-python does not pass this consumer setting to its metadata; the source never
        # creates topics (not even a misspelt ``topic`` option).
        self._manager.cluster.config["allow_auto_create_topics"] = False
        self._closed = False
        self._net.start()
        started = time.monotonic()
        try:
            # a definite TLS/SASL refusal is named at once instead of being retried as a
            # network error until the bootstrap timeout
            probe(self._client, opts.connect_timeout_s, config)
        except KafkaSecurityError as exc:
            self.close()
            raise KafkaAuthenticationFailed(str(exc)) from None
        except BaseException:
            self.close()
            raise
        try:
            self._manager.bootstrap(config["bootstrap_timeout_ms"])
        except _BOOTSTRAP_ERRORS as exc:
            self.close()
            hint = ""
            protocol = str(config.get("security_protocol", "PLAINTEXT")).upper()
            if protocol != "PLAINTEXT":
                hint = f" (security_protocol {protocol}: check the TLS/SASL settings too)"
            log.debug("bootstrap failed after %.1fs: %r", time.monotonic() - started, exc)
            raise KafkaUnreachable(
                f"cannot reach broker(s) {opts.bootstrap_servers} within "
                f"{opts.connect_timeout_s:g}s{hint}") from None
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close connections and stop the IO thread; never raises (it must not mask errors)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._client.close()
        except Exception:
            log.debug("closing the kafka wire client failed", exc_info=True)

    # ---- futures across the IO thread

    async def _await(self, future: Future, timeout_ms: float | None) -> Any:
        return await self._manager.wait_for(future, timeout_ms)

    async def _send_to(self, request: Any, node_id: int) -> Any:
        return await self._manager.send(request, node_id=node_id)

    def wait(self, future: Future, timeout_ms: float | None = None) -> Any:
        """The value of a kafka-python Future; its exception is raised (timeout:
        ``KafkaTimeoutError``)."""
        return self._net.run(self._await, future,
                             self.request_timeout_ms if timeout_ms is None else timeout_ms)

    def send(self, request: Any, node_id: int) -> Future:
        """Send ``request`` to ``node_id`` from the IO thread; a Future of the response."""
        return self._manager.call_soon(self._send_to, request, node_id)

    # ---- metadata

    @property
    def cluster_id(self) -> str | None:
        value = self._manager.cluster.cluster_id
        return value if isinstance(value, str) else None

    def refresh_metadata(self, timeout_ms: float | None = None) -> bool:
        """Send a Metadata request now and wait for it; False when that failed (logged).
        Why not ``cluster.request_update()``: the refresh loop would wait out its backoff
        first (100 ms), paid by every fresh client asking for its topic."""
        try:
            self.wait(self._manager.call_soon(self._manager.cluster.refresh_metadata),
                      timeout_ms)
            return True
        except kafka_errors.KafkaError as exc:
            log.debug("metadata refresh failed: %r", exc)
            return False

    def partitions(self, topic: str) -> list[int] | None:
        """Partition ids of ``topic``, None when the brokers do not know it.
        :class:`KafkaNotAuthorized` when they answered TOPIC_AUTHORIZATION_FAILED."""
        cluster = self._manager.cluster
        found = cluster.partitions_for_topic(topic)
        if found is None:
            cluster.add_topic(topic)  # tracked from now on (the refresh loop keeps it fresh)
            self.refresh_metadata()
            found = cluster.partitions_for_topic(topic)
        if found is None and topic in cluster.unauthorized_topics:
            raise KafkaNotAuthorized(
                f"topic {topic}: not authorized to describe it on {self.opts.bootstrap_servers} "
                "(the principal needs DESCRIBE and READ on the topic)")
        return None if found is None else sorted(found)

    def leader(self, topic: str, partition: int) -> tuple[int | None, int]:
        """(leader node id or None if unknown/unavailable, its leader epoch or -1)."""
        cluster = self._manager.cluster
        tp = TopicPartition(topic, partition)
        if cluster.partitions_for_topic(topic) is None:
            self.partitions(topic)
        node = cluster.leader_for_partition(tp)
        epoch = cluster.leader_epoch_for_partition(tp)
        if node is None or node < 0:
            return None, -1
        return node, -1 if epoch is None else int(epoch)

    # ---- ListOffsets

    def list_offsets(self, topic: str, partitions: Sequence[int], spec: int,
                     timeout_ms: float) -> dict[int, int]:
        """ListOffsets with isolation_level=1 (``LATEST`` answers the last stable offset),
        retrying leader moves and broker restarts until ``timeout_ms``, then
        ``KafkaTimeoutError``."""
        deadline = time.monotonic() + timeout_ms / 1000
        remaining = set(partitions)
        out: dict[int, int] = {}
        T = ListOffsetsRequest.ListOffsetsTopic
        P = T.ListOffsetsPartition
        while True:
            by_node: dict[int, list[tuple[int, int]]] = {}
            for p in sorted(remaining):
                node, epoch = self.leader(topic, p)
                if node is not None:
                    by_node.setdefault(node, []).append((p, epoch))
            calls = {node: self.send(ListOffsetsRequest(
                isolation_level=READ_COMMITTED, min_version=LIST_OFFSETS_MIN_VERSION,
                topics=[T(name=topic, partitions=[
                    P(partition_index=p, current_leader_epoch=epoch, timestamp=spec)
                    for p, epoch in parts])]), node)
                for node, parts in by_node.items()}
            stale = len(by_node) == 0
            for node, future in calls.items():
                left_ms = max(1.0, (deadline - time.monotonic()) * 1000)
                try:
                    response = self.wait(future, left_ms)
                except kafka_errors.KafkaError as exc:
                    if not getattr(exc, "retriable", False):
                        raise
                    log.debug("ListOffsets to node %s failed: %r", node, exc)
                    stale = True
                    continue
                for t in response.topics:
                    for part in t.partitions:
                        error = kafka_errors.for_code(part.error_code)
                        if error is kafka_errors.NoError:
                            out[part.partition_index] = int(part.offset)
                            remaining.discard(part.partition_index)
                        elif error is kafka_errors.TopicAuthorizationFailedError:
                            raise KafkaNotAuthorized(
                                f"topic {topic}: not authorized to list its offsets (needs "
                                "DESCRIBE on the topic)")
                        elif getattr(error, "retriable", False):
                            log.debug("ListOffsets %s-%d: %s", topic, part.partition_index,
                                      error.__name__)
                            stale = True
                        else:
                            raise error(f"ListOffsets {topic}-{part.partition_index}")
            if not remaining:
                return out
            if time.monotonic() >= deadline:
                raise kafka_errors.KafkaTimeoutError(
                    f"ListOffsets({spec}) of {topic} {sorted(remaining)}")
            if stale:
                self.refresh_metadata(max(1.0, (deadline - time.monotonic()) * 1000))
            time.sleep(min(self.retry_backoff_s, max(0.0, deadline - time.monotonic())))

    # ---- Fetch

    def fetch(self, topic: str, partition: int, offset: int, partition_max_bytes: int,
              max_wait_ms: int) -> tuple[Future, int | None]:
        """Send a read_committed Fetch of one partition to its leader: (response Future, node).
        No known leader: a failed Future (LeaderNotAvailableError) and None."""
        node, epoch = self.leader(topic, partition)
        if node is None:
            return Future().failure(kafka_errors.LeaderNotAvailableError(
                f"{topic}-{partition}")), None
        T = FetchRequest.FetchTopic
        request = FetchRequest(
            max_wait_ms=max_wait_ms, min_bytes=1,
            max_bytes=max(self.fetch_max_bytes, partition_max_bytes),
            isolation_level=READ_COMMITTED, session_id=0, session_epoch=-1,  # sessionless
            topics=[T(topic=topic, partitions=[T.FetchPartition(
                partition=partition, current_leader_epoch=epoch, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=partition_max_bytes)])],
            forgotten_topics_data=[], rack_id="",
            min_version=FETCH_MIN_VERSION, max_version=FETCH_MAX_VERSION)
        return self.send(request, node), node


class KafkaOffsetsClient:
    """Driver-side view of the topic: partitions, earliest offsets and LSOs.

    One wire client (:class:`KafkaWire`; it fetches only to count records ahead) kept
    for the reader's lifetime, so each micro-batch costs one ListOffsets round trip instead of
    a new connection. :class:`KafkaUnreachable` after ``connect_timeout_s``."""

    def __init__(self, opts: SourceOptions) -> None:
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

    @property
    def wire(self) -> KafkaWire:
        """The connection, for the driver's fetch-ahead record count (planning by records)."""
        return self._wire

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

