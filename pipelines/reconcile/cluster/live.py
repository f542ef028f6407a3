"""Live-cluster snapshot: what the brokers say about groups and committed offsets right now.

Why: the lake's coordinator-state tables are rebuilt from ``__consumer_offsets``; to
reconcile them we need the brokers' own answers (spec section 3) taken at a known point.
The snapshot therefore reads the ``__consumer_offsets`` high watermarks *first*: a topic
reader that has consumed up to those watermarks saw everything the answers can reflect,
and anything newer on the broker is classified as "broker ahead of snapshot" (spec 3.3).

This module connects (the one strict Kafka option normaliser, a probe that names TLS/SASL
refusals) and runs the capture (:mod:`~pipelines.reconcile.cluster.capture`) on
kafka-python's I/O thread; the rows are built by :mod:`~pipelines.reconcile.cluster.assemble`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import kafka.errors as Errors
from kafka.admin import KafkaAdminClient
from kafka.net.compat import KafkaNetClient

from pipelines.kafka_options import KafkaSecurityError, normalize, probe
from pipelines.reconcile.cluster.assemble import assemble
from pipelines.reconcile.cluster.capture import Capture
from pipelines.reconcile.cluster.errors import ClusterUnreachable
from pipelines.reconcile.cluster.rows import ClusterSnapshot

log = logging.getLogger(__name__)


def capture_snapshot(bootstrap_servers: str | Sequence[str], *, require_stable: bool = False,
                     timeout_s: float = 10.0, request_timeout_ms: int = 30_000,
                     max_retries: int = 5, retry_backoff_ms: int = 100,
                     max_backoff_ms: int = 2_000, client_id: str = "offsetlake-snapshot",
                     expected_offsets: Mapping[str, Iterable[tuple[str, int]]] | None = None,
                     **kafka_config: Any) -> ClusterSnapshot:
    """Capture groups, members, committed offsets, log end offsets and lag from a live cluster.

    Order matters: the ``__consumer_offsets`` high watermarks are read first (the snapshot
    point, with ``captured_at``), then ListGroups on every broker, DescribeGroups /
    ConsumerGroupDescribe, OffsetFetch (topics=null; v8 batches per coordinator), and the
    log end offsets of the partitions the groups hold offsets for.

    ``require_stable`` (OffsetFetch v7+) makes partitions with pending transactional offsets
    answer UNSTABLE_OFFSET_COMMIT, recorded in their offset rows. ``timeout_s`` bounds the
    bootstrap; ``max_retries`` / ``retry_backoff_ms`` (doubling, capped by ``max_backoff_ms``)
    bound the retries of retriable group errors. ``kafka_config`` passes through to
    kafka-python's KafkaAdminClient (``security_protocol``, ``sasl_mechanism``,
    ``sasl_plain_username``, ``sasl_plain_password``, ``ssl_cafile``, ``ssl_certfile``, ...).

    ``expected_offsets`` (group -> (topic, partition) pairs, e.g. what the lake holds) are
    asked by name when the broad answers leave them out, so what ACLs hide is answered
    GROUP/TOPIC_AUTHORIZATION_FAILED and recorded (``not_authorized``, ``partial``) instead of
    silently missing. Kafka options go through :func:`pipelines.kafka_options.normalize`.

    Raises :class:`ClusterUnreachable` when no bootstrap server answers within ``timeout_s``,
    :class:`~pipelines.kafka_options.KafkaAuthenticationError` at once on a definite SASL/TLS
    refusal, :class:`~pipelines.kafka_options.KafkaOptionError` for invalid options.
    """
    servers = (bootstrap_servers if isinstance(bootstrap_servers, str)
               else ",".join(bootstrap_servers))
    started = time.monotonic()
    admin = _connect(servers, client_id=client_id, timeout_s=timeout_s,
                     request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
                     kafka_config=kafka_config)
    try:
        capture = Capture(
            admin, require_stable=require_stable, max_retries=max_retries,
            retry_backoff_ms=retry_backoff_ms, max_backoff_ms=max_backoff_ms,
            request_timeout_ms=request_timeout_ms,
            max_in_flight=admin.config["max_in_flight_requests_per_connection"],
            expected=expected_offsets)
        raw = admin._manager.run(capture.run)
    finally:
        admin.close()
    snapshot = assemble(raw, source=servers, require_stable=require_stable)
    log.info("snapshot %s of %s: %d groups, %d offset rows, %d errors in %.2fs",
             snapshot.snapshot_id, servers, len(snapshot.groups), len(snapshot.offsets),
             len(snapshot.errors), time.monotonic() - started)
    return snapshot


def _connect(servers: str, *, client_id: str, timeout_s: float, request_timeout_ms: int,
             retry_backoff_ms: int, kafka_config: dict[str, Any]) -> KafkaAdminClient:
    """An admin client on ``servers``, or the reason why not: option and TLS/SASL errors
    raised as they are, anything else as :class:`ClusterUnreachable` (one line)."""
    created: list[KafkaNetClient] = []
    user_factory = kafka_config.pop("kafka_client", KafkaNetClient)
    # the one strict normaliser (also used by ingest): unknown keys, bad booleans, SASL/SSL
    # settings without a protocol using them are refused (KafkaOptionError)
    kafka_config = normalize(kafka_config, KafkaAdminClient.DEFAULT_CONFIG)
    probe_config = {**kafka_config, "bootstrap_servers": servers}

    def factory(**cfg: Any) -> KafkaNetClient:
        client = user_factory(**cfg)
        created.append(client)
        # a definite TLS/SASL refusal is named now, not retried until bootstrap_timeout_ms
        probe(client, timeout_s, probe_config)
        return client

    try:
        return KafkaAdminClient(
            bootstrap_servers=servers, client_id=client_id,
            request_timeout_ms=request_timeout_ms, bootstrap_timeout_ms=int(timeout_s * 1000),
            retry_backoff_ms=retry_backoff_ms, kafka_client=factory, **kafka_config)
    except (Errors.KafkaConfigurationError, KafkaSecurityError):
        for client in created:
            _close_quietly(client)
        raise
    except Errors.KafkaError as exc:
        for client in created:  # KafkaAdminClient leaves its I/O thread running on failure
            _close_quietly(client)
        if isinstance(exc, (Errors.KafkaTimeoutError, Errors.KafkaConnectionError,
                            Errors.NodeNotReadyError)):
            message = f"cannot reach bootstrap servers {servers} within {timeout_s:g}s"
        else:  # e.g. SASL authentication or authorization failures during bootstrap
            message = (f"cannot connect to bootstrap servers {servers}: "
                       f"{type(exc).__name__}: {exc}".replace("\n", " "))
        raise ClusterUnreachable(message) from exc


def _close_quietly(client: KafkaNetClient) -> None:
    try:
        client.close()
    except Exception:
        log.debug("closing a failed client", exc_info=True)
    try:
        client._net.stop()
    except Exception:
        log.debug("stopping a failed client's I/O thread", exc_info=True)
