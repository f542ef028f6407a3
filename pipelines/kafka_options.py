"""Kafka client options: one strict normaliser for ingest and snapshot, where they come from,
and how an authentication, TLS or authorization refusal is named.

Why one module: the ``kafka`` source (ingest) and the snapshot used to read options each
their own way, so ``ssl.check.hostname=flase`` silently turned hostname checks off in one
and was refused by the other, and SASL settings given without a SASL ``security.protocol``
were ignored (the client spoke plaintext). Here:

* :func:`normalize` accepts known keys only (kafka-python's names, their dotted spelling,
  and the Java client's ``sasl.jaas.config`` / ``ssl.truststore.location`` /
  ``ssl.keystore.location`` / ``ssl.key.password`` /
  ``ssl.endpoint.identification.algorithm``), parses booleans strictly, validates
  ``security.protocol`` and ``sasl.mechanism``, refuses SASL or SSL settings without a
  protocol that uses them, and fails with one line that never shows a secret's value;
* :func:`gather` merges the sources, lowest precedence first: a Java-properties file
  (``--kafka-options-file``, like Kafka's ``--command-config``), ``OFFSETLAKE_KAFKA_OPTION_<KEY>``
  environment variables (``OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD``), then
  ``--kafka-option KEY=VALUE``; so a secret never has to be on a command line;
* :func:`probe` connects to a bootstrap server once before a client bootstraps and turns a
  definite refusal (bad credentials, mechanism not enabled, certificate not trusted, hostname
  mismatch) into :class:`KafkaAuthenticationError` at once. kafka-python 3.0.12 retries such
  refusals like network errors until its bootstrap timeout and then reports "Unable to
  bootstrap" (``KafkaConnection.initialize`` swallows the error into the connection's future,
  so the manager's auth-failure cache never sees it).

Every secret value seen is registered with :mod:`pipelines.redaction`, so it is masked in
every later log line and message.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipelines.redaction import is_secret_key, redact, register_secret

log = logging.getLogger(__name__)

ENV_PREFIX = "OFFSETLAKE_KAFKA_OPTION_"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER",
                   "AWS_MSK_IAM")
_NEEDS_PASSWORD = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_TRUE = frozenset({"true"})
_FALSE = frozenset({"false"})

#: kafka-python settings whose values are Python objects: never settable from a string.
OBJECT_VALUED = frozenset({
    "key_deserializer", "value_deserializer", "default_offset_commit_callback",
    "partition_assignment_strategy", "metric_reporters", "selector", "kafka_client",
    "ssl_context", "sasl_oauth_token_provider", "socket_options",
})
_INT_WITH_NONE_DEFAULT = frozenset({"receive_buffer_bytes", "send_buffer_bytes",
                                    "connections_max_idle_ms"})
_FILE_SETTINGS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile")


class KafkaOptionError(ValueError):
    """A Kafka client option is unknown, malformed or contradicts another (one line)."""


class KafkaSecurityError(RuntimeError):
    """Base of the named security failures (one-line messages, printed as they are)."""


class KafkaAuthenticationError(KafkaSecurityError):
    """The broker refused who we are (SASL) or we refused the broker (TLS)."""


class KafkaAuthorizationError(KafkaSecurityError):
    """Authenticated, but not allowed to see or read what is needed (ACLs)."""


# ----------------------------------------------------------------------------- sources


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java ``.properties`` file (``key=value``, ``key: value`` or ``key value``; ``#`` and
    ``!`` comments; ``\\`` line continuations and escapes), as Kafka's ``--command-config``."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise KafkaOptionError(f"cannot read Kafka options file {file}: {exc.strerror}") from None
    out: dict[str, str] = {}
    logical: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not logical and (not line or line[0] in "#!"):
            continue
        # an odd number of trailing backslashes continues the line
        stripped = line.rstrip("\r")
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(stripped[:-1])
            if i < len(lines):
                continue
        else:
            logical.append(stripped)
        entry = "".join(logical)
        logical = []
        match = re.match(r"((?:[^\\=:\s]|\\.)*)\s*[=:\s]\s*(.*)$", entry)
        key, value = (match.group(1), match.group(2)) if match else (entry, "")
        out[_unescape(key)] = _unescape(value)
    return out


def _unescape(text: str) -> str:
    mapping = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return re.sub(r"\\(.)", lambda m: mapping.get(m.group(1), m.group(1)), text)


def options_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD=x`` -> ``{"sasl.plain.password": "x"}``."""
    env = os.environ if environ is None else environ
    return {name[len(ENV_PREFIX):].lower().replace("_", "."): value
            for name, value in env.items() if name.startswith(ENV_PREFIX) and name != ENV_PREFIX}


def gather(cli: Mapping[str, str] | None = None, options_file: str | Path | None = None,
           environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Raw options from file, environment and command line (later ones win), keys in one
    spelling (dotted lower case) so that a file's ``sasl.jaas.config`` and an env var's
    ``SASL_JAAS_CONFIG`` are the same key."""
    merged: dict[str, str] = {}
    layers: list[Mapping[str, str]] = []
    if options_file:
        layers.append(read_properties(options_file))
    layers.append(options_from_env(environ))
    layers.append(dict(cli or {}))
    for layer in layers:
        for key, value in layer.items():
            canonical = str(key).strip().lower().replace("_", ".")
            if is_secret_key(canonical):
                register_secret(value)
                if layer is layers[-1]:
                    log.warning("Kafka option %s was given on the command line, where every "
                                "user of this machine can read it (ps): pass it as %s%s or in "
                                "--kafka-options-file", canonical, ENV_PREFIX,
                                canonical.upper().replace(".", "_"))
            merged[canonical] = value
    return merged


# ----------------------------------------------------------------------------- normalise


_JAAS_PAIR = re.compile(r"""(\w+)\s*=\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s;]+)""")


def _parse_jaas(value: str) -> dict[str, str]:
    """username/password of a ``sasl.jaas.config`` (PlainLoginModule / ScramLoginModule)."""
    found = {}
    for key, raw in _JAAS_PAIR.findall(value):
        found[key.lower()] = raw[1:-1] if raw[:1] in "\"'" else raw
    if "username" not in found or "password" not in found:
        raise KafkaOptionError("sasl.jaas.config: expected a PlainLoginModule or ScramLoginModule "
                               'entry with username="..." password="..."')
    register_secret(found["password"])
    return {"sasl_plain_username": found["username"], "sasl_plain_password": found["password"]}


def _java_setting(key: str, value: str, raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """Java client keys kafka-python spells differently; None when ``key`` is not one."""
    if key == "sasl.jaas.config":
        return _parse_jaas(value)
    if key in ("ssl.truststore.location", "ssl.keystore.location"):
        kind = str(raw.get(key.replace("location", "type"), "PEM")).upper()
        if kind != "PEM" or str(value).lower().endswith((".jks", ".p12", ".pfx")):
            raise KafkaOptionError(
                f"{key}: only PEM files are supported (kafka-python uses Python's ssl); convert "
                "the JKS/PKCS12 store to PEM and set ssl.cafile / ssl.certfile")
        return {"ssl_cafile" if "truststore" in key else "ssl_certfile": value}
    if key in ("ssl.truststore.type", "ssl.keystore.type"):
        if str(value).upper() != "PEM":
            raise KafkaOptionError(f"{key}={value}: only PEM is supported")
        return {}
    if key in ("ssl.key.password", "ssl.keystore.password"):
        return {"ssl_password": value}
    if key == "ssl.truststore.password":
        return {}  # PEM trust stores have no password
    if key == "ssl.endpoint.identification.algorithm":
        v = str(value).strip().lower()
        if v not in ("https", ""):
            raise KafkaOptionError(f"{key}={value!r}: expected https or an empty value")
        return {"ssl_check_hostname": v == "https"}
    return None


def _shown(key: str, value: Any) -> str:
    return "***" if is_secret_key(key) else repr(value)


def parse_bool(key: str, value: Any) -> bool:
    """``true`` / ``false`` (any case), nothing else: a typo must not flip a security check."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise KafkaOptionError(f"Kafka option {key}={_shown(key, value)}: expected true or false")


def _coerce(key: str, value: Any, default: Any) -> Any:
    if not isinstance(value, str):
        return value
    if key in OBJECT_VALUED:
        raise KafkaOptionError(f"Kafka option {key} takes a Python object and cannot be given "
                               "as text")
    try:
        if isinstance(default, bool):
            return parse_bool(key, value)
        if isinstance(default, int) or key in _INT_WITH_NONE_DEFAULT or \
                key.endswith(("_ms", "_bytes")):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError as exc:
        if isinstance(exc, KafkaOptionError):
            raise
        raise KafkaOptionError(f"Kafka option {key}={_shown(key, value)}: expected a number") \
            from None
    return value


def normalize(raw: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Validated, typed kafka-python settings from raw options.

    ``defaults`` are the known settings and their defaults (e.g. ``KafkaConsumer.DEFAULT_CONFIG``
    for ingest, ``KafkaAdminClient.DEFAULT_CONFIG`` plus the capture's own knobs for the
    snapshot); a string value takes the type of its default. Keys may be kafka-python's
    (``sasl_plain_password``), dotted (``sasl.plain.password``) or the Java client's names.
    Raises :class:`KafkaOptionError`.
    """
    out: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = str(key).strip().lower().replace("_", ".")
        if is_secret_key(dotted):
            register_secret(value)
        java = _java_setting(dotted, value, {str(k).lower().replace("_", "."): v
                                             for k, v in raw.items()})
        settings = java if java is not None else {str(key).strip().replace(".", "_"): value}
        for name, val in settings.items():
            if name not in defaults:
                raise KafkaOptionError(f"unknown Kafka option {dotted!r}")
            out[name] = _coerce(name, val, defaults[name])
    _validate(out, defaults)
    return out


def _validate(cfg: dict[str, Any], defaults: Mapping[str, Any]) -> None:
    protocol = str(cfg.get("security_protocol", defaults.get("security_protocol", "PLAINTEXT")))
    protocol = protocol.strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise KafkaOptionError(f"security.protocol={cfg.get('security_protocol')!r}: expected one "
                               f"of {', '.join(SECURITY_PROTOCOLS)}")
    if "security_protocol" in cfg:
        cfg["security_protocol"] = protocol
    sasl_keys = sorted(k for k in cfg if k.startswith("sasl_"))
    ssl_keys = sorted(k for k in cfg if k.startswith("ssl_"))
    uses_sasl = protocol.startswith("SASL_")
    uses_ssl = protocol in ("SSL", "SASL_SSL")
    if sasl_keys and not uses_sasl:
        raise KafkaOptionError(
            f"{', '.join(k.replace('_', '.') for k in sasl_keys)} given but security.protocol is "
            f"{protocol}: set security.protocol=SASL_SSL or SASL_PLAINTEXT (refusing to connect "
            "without the authentication you configured)")
    if ssl_keys and not uses_ssl:
        raise KafkaOptionError(
            f"{', '.join(k.replace('_', '.') for k in ssl_keys)} given but security.protocol is "
            f"{protocol}: set security.protocol=SSL or SASL_SSL (refusing to connect without the "
            "TLS you configured)")
    if uses_sasl:
        mechanism = cfg.get("sasl_mechanism")
        if mechanism is None:
            raise KafkaOptionError(f"security.protocol={protocol} needs sasl.mechanism (one of "
                                   f"{', '.join(SASL_MECHANISMS)})")
        mechanism = str(mechanism).strip().upper()
        if mechanism not in SASL_MECHANISMS:
            raise KafkaOptionError(f"sasl.mechanism={cfg['sasl_mechanism']!r}: expected one of "
                                   f"{', '.join(SASL_MECHANISMS)}")
        cfg["sasl_mechanism"] = mechanism
        if mechanism in _NEEDS_PASSWORD:
            missing = [k.replace("_", ".") for k in ("sasl_plain_username", "sasl_plain_password")
                       if not cfg.get(k)]
            if missing:
                raise KafkaOptionError(
                    f"sasl.mechanism={mechanism} needs {' and '.join(missing)} (or "
                    "sasl.jaas.config); pass the password through OFFSETLAKE_KAFKA_OPTION_"
                    "SASL_PLAIN_PASSWORD or --kafka-options-file, not the command line")
    for name in _FILE_SETTINGS:
        path = cfg.get(name)
        if path and not Path(str(path)).is_file():
            raise KafkaOptionError(f"{name.replace('_', '.')}={path}: no such file")


# ----------------------------------------------------------------------------- failures


def describe_refusal(exc: BaseException, config: Mapping[str, Any]) -> str | None:
    """One line naming a definite authentication/TLS refusal; None for anything else
    (e.g. a refused TCP connection: retrying may help)."""
    import kafka.errors as Errors  # here, not at import: kafka-python costs ~0.1 s to import

    mechanism = config.get("sasl_mechanism")
    user = config.get("sasl_plain_username")
    text = redact(str(exc)).replace("\n", " ")
    if isinstance(exc, Errors.UnsupportedSaslMechanismError):
        return (f"authentication failed: SASL mechanism {mechanism} is not enabled on the broker "
                f"({text})")
    if isinstance(exc, Errors.SaslAuthenticationFailedError):
        detail = text.split(": ")[-1]
        return (f"authentication failed: the broker refused user {user!r} with {mechanism} "
                f"(bad credentials or unknown user): {detail}")
    if isinstance(exc, Errors.IllegalSaslStateError):
        return f"authentication failed: SASL handshake refused ({type(exc).__name__}: {text})"
    if isinstance(exc, Errors.AuthorizationError):
        return f"not authorized: {type(exc).__name__}: {text}"
    if isinstance(exc, ssl.SSLError) or "Handshake failed" in text:
        lowered = text.lower()
        if "mismatch" in lowered or "doesn't match" in lowered:
            return (f"TLS hostname verification failed: the broker's certificate is not valid "
                    f"for the address connected to ({text})")
        if "certificate_verify_failed" in lowered or "certificate verify failed" in lowered:
            return (f"TLS certificate verification failed: the broker's certificate is not "
                    f"trusted (check ssl.cafile): {text}")
        if "wrong_version_number" in lowered or "wrong version number" in lowered \
                or "record layer failure" in lowered or "packet length too long" in lowered:
            return (f"TLS handshake failed: the listener does not speak TLS (is "
                    f"security.protocol={config.get('security_protocol')} right?): {text}")
        if isinstance(exc, ssl.SSLError) or "ssl" in lowered or "tls" in lowered:
            return f"TLS handshake failed: {text}"
    if isinstance(exc, (FileNotFoundError, PermissionError)):
        return f"TLS setup failed: {text}"
    return None


async def _probe_loop(manager: Any, deadline: float, config: Mapping[str, Any]) -> bool:
    """Connect to bootstrap servers until one connection completes (True), a definite refusal
    (raised), or the deadline (False)."""
    import kafka.errors as Errors

    net = manager._net
    while time.monotonic() < deadline:
        waited = False
        for broker in manager.cluster.bootstrap_brokers():
            node = broker.node_id
            if manager.connection_delay(node) > 0:
                continue
            try:
                conn = manager.get_connection(
                    node, timeout_ms=max(1.0, (deadline - time.monotonic()) * 1000),
                    pop_on_close=False, refresh_metadata_on_err=False,
                    reset_backoff_on_connect=False)
            except Errors.NodeNotReadyError:
                continue
            except Exception as exc:  # a cached auth failure
                reason = describe_refusal(exc, config)
                if reason:
                    raise KafkaAuthenticationError(reason) from None
                raise
            waited = True
            try:
                await conn
            except Exception as exc:
                manager._conns.pop(node, None)
                conn.close(exc)
                reason = describe_refusal(exc, config)
                if reason:
                    raise KafkaAuthenticationError(f"{broker.host}:{broker.port}: {reason}") \
                        from None
                manager.update_backoff(node)
                continue
            manager._conns.pop(node, None)
            conn.close()
            manager.reset_backoff(node)
            return True
        if not waited:
            await net.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    return False


def probe(client: Any, timeout_s: float, config: Mapping[str, Any]) -> None:
    """Before a kafka-python client bootstraps over TLS or SASL: one real connection, so a
    definite refusal raises :class:`KafkaAuthenticationError` now, not after the bootstrap
    timeout as an "unreachable" cluster. Does nothing for PLAINTEXT (nothing to refuse).
    ``client`` is a ``KafkaNetClient`` (its I/O thread may or may not run yet)."""
    if str(config.get("security_protocol", "PLAINTEXT")).upper() == "PLAINTEXT":
        return
    manager = client._manager
    deadline = time.monotonic() + max(timeout_s, 0.1)
    client._net.run(_probe_loop, manager, deadline, config)


__all__ = ["ENV_PREFIX", "SASL_MECHANISMS", "SECURITY_PROTOCOLS", "KafkaAuthenticationError",
           "KafkaAuthorizationError", "KafkaOptionError", "KafkaSecurityError",
           "describe_refusal", "gather", "normalize", "options_from_env", "parse_bool",
           "probe", "read_properties"]
