"""The Kafka source's named errors and :func:`explain_failure`, which finds one in Spark's trace.

Why a module of its own: the options, the wire client, the range reader, the Spark data source
and the CLI all raise or print these; keeping them at the bottom of the package is what lets
the other modules import each other in one direction only.
"""

from __future__ import annotations

import re

from pipelines.redaction import redact


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

