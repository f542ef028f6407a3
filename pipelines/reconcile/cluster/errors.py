"""Kafka error codes as the snapshot reasons about them, and the one unrecoverable failure.

Why: the capture, the time-lag reads and the recorded path all name broker error codes the
same way (Kafka's canonical names) and retry the same codes the same way (spec 3.2); one
place keeps those decisions identical. The Kafka client's errors are imported where they are
asked: ``reconcile`` reads only the codes, and needs no Kafka client (~0.1 s to import).
"""

from __future__ import annotations

# Kafka error codes this package reasons about (org.apache.kafka.common.protocol.Errors)
UNKNOWN_SERVER_ERROR = -1
NONE = 0
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
NETWORK_EXCEPTION = 13
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
UNSUPPORTED_VERSION = 35
UNKNOWN_LEADER_EPOCH = 74
UNSTABLE_OFFSET_COMMIT = 88

# Retried after looking the coordinator up again / retried as is (spec 3.2).
REDISCOVER = frozenset({NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, NETWORK_EXCEPTION,
                        REQUEST_TIMED_OUT})
RETRY_SAME = frozenset({COORDINATOR_LOAD_IN_PROGRESS})
LEADER_RETRY = frozenset({LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH,
                          NETWORK_EXCEPTION, REQUEST_TIMED_OUT})


class ClusterUnreachable(RuntimeError):
    """No usable connection: the bootstrap servers did not answer in time, refused the
    client (e.g. SASL authentication), or the cluster's metadata vanished mid-capture.

    The message is one line, meant to be printed as is by a CLI.
    """


def error_name(code: int | None) -> str | None:
    """Kafka's canonical name for an error code (``None`` for no error)."""
    if code is None or code == NONE:
        return None
    if code == UNKNOWN_SERVER_ERROR:
        return "UNKNOWN_SERVER_ERROR"
    import kafka.errors as Errors

    cls = Errors.for_code(code)
    if getattr(cls, "errno", None) == code and getattr(cls, "message", None):
        return str(cls.message)
    return f"UNKNOWN_ERROR_CODE_{code}"


def code_of(exc: BaseException) -> int:
    """Map a client-side exception to the Kafka error code that describes it best."""
    import kafka.errors as Errors

    if isinstance(exc, Errors.IncompatibleBrokerVersion):
        return UNSUPPORTED_VERSION
    if isinstance(exc, (Errors.KafkaTimeoutError, Errors.RequestTimedOutError)):
        return REQUEST_TIMED_OUT
    if isinstance(exc, (Errors.KafkaConnectionError, Errors.NodeNotReadyError,
                        Errors.UnknownBrokerIdError, Errors.Cancelled)):
        return NETWORK_EXCEPTION
    errno = getattr(exc, "errno", None)
    return errno if isinstance(errno, int) else UNKNOWN_SERVER_ERROR
