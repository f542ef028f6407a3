"""One redaction for every log line, error and summary.

Why: kafka-python logs whole client configurations at DEBUG (``KafkaAdminClient`` prints its
``configs`` dict, passwords included), exceptions may carry option values, and a summary is
printed to stdout. Rather than trusting each call site, secrets are masked in two ways, both
applied by :class:`RedactingFilter` to every record reaching the root logger's handlers
(kafka-python's own loggers included) and by :func:`redact` to anything printed:

* values of keys that name a secret (``password``, ``secret``, ``token``, ``jaas``,
  ``credential``), in ``key=value``, ``key: value`` and ``'key': 'value'`` spellings;
* every secret value known at run time (:func:`register_secret`, called by the option
  normaliser for each secret it sees), wherever it appears.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

MASK = "***"

#: Keys whose values are secrets (Kafka's and kafka-python's spellings, env var names).
SECRET_KEY = re.compile(r"password|passwd|secret|token|jaas|credential", re.IGNORECASE)

# key (optionally quoted) then = or : then a value (quoted, or up to a separator)
_KEY_VALUE = re.compile(
    r"""(?P<key>["']?[\w.\-]*(?:password|passwd|secret|token|jaas|credential)[\w.\-]*["']?)"""
    r"""(?P<sep>\s*[=:]\s*)"""
    r"""(?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s,;)}\]]+)""",
    re.IGNORECASE)

_lock = threading.Lock()
_secrets: set[str] = set()
#: Shorter values are not masked as free text (they would mask unrelated words); their
#: key=value spelling is still masked.
MIN_SECRET_LENGTH = 4


def is_secret_key(key: str) -> bool:
    """True when ``key`` names a secret (its value must never be shown)."""
    return bool(SECRET_KEY.search(key))


def register_secret(value: object) -> None:
    """Remember a secret value so that it is masked wherever it appears later."""
    if isinstance(value, str) and len(value) >= MIN_SECRET_LENGTH:
        with _lock:
            _secrets.add(value)


def register_secrets(values: Iterable[object]) -> None:
    for value in values:
        register_secret(value)


def _mask_pair(match: re.Match[str]) -> str:
    value = match.group("value")
    if value in ("None", "null", "''", '""'):
        return match.group(0)
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match.group('key')}{match.group('sep')}{quote}{MASK}{quote}"


def redact(text: str) -> str:
    """``text`` with secret key/value pairs and every registered secret value masked."""
    if not text:
        return text
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    return _KEY_VALUE.sub(_mask_pair, text)


def redact_mapping(config: dict) -> dict:
    """A copy of ``config`` with the values of secret keys masked (for logs)."""
    return {k: (MASK if is_secret_key(str(k)) and v not in (None, "") else v)
            for k, v in config.items()}


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's final message and traceback text (handler filter)."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler to report
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FILTER = RedactingFilter()


def install(logger: logging.Logger | None = None) -> None:
    """Put the filter on every handler of ``logger`` (default: root), once. Handler filters
    see records from every logger that propagates there, unlike logger filters."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)


__all__ = ["MASK", "SECRET_KEY", "RedactingFilter", "install", "is_secret_key", "redact",
           "redact_mapping", "register_secret", "register_secrets"]
