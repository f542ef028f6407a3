"""Issue 14, secure by default: one strict option normaliser, secrets never shown, SASL/TLS
refusals named fast, ACL refusals named and recorded (partial snapshots), reconcile never
passing on less than a full check.

Against the in-test broker (tests/support/fake_broker.py) with SASL/SCRAM (a real RFC 5802
exchange; kafka-python is the client) and ACL answers as Kafka's StandardAuthorizer gives
them, and a real TLS listener (Python's ssl with certificates made here) for the TLS cases.
"""

from __future__ import annotations

import datetime as dt
import io
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines import redaction
from pipelines.kafka_options import (
    KafkaAuthenticationError,
    KafkaOptionError,
    gather,
    normalize,
    read_properties,
)
from pipelines.reconcile.cluster.live import capture_snapshot
from pipelines.sources.kafka.errors import (
    KafkaAuthenticationFailed,
    KafkaNotAuthorized,
    KafkaSourceConfigError,
)
from pipelines.sources.kafka.options import SourceOptions
from pipelines.sources.kafka.wire import check_access
from tests.support.fake_broker import OFFSETS_TOPIC, FakeKafkaCluster

PASSWORD = "Pw-7f3c9a-unguessable"  # the test secret every check greps for
FAST = {"timeout_s": 10, "request_timeout_ms": 5000, "retry_backoff_ms": 10,
        "max_backoff_ms": 50}


def sasl(user: str = "auditor", password: str = PASSWORD,
         mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}


def admin_defaults() -> dict[str, Any]:
    from kafka.admin import KafkaAdminClient

    return dict(KafkaAdminClient.DEFAULT_CONFIG)


# ----------------------------------------------------------------------------- normaliser


@pytest.mark.parametrize(("options", "message"), [
    ({"no.such.option": "1"}, "unknown Kafka option"),
    ({"security.protocol": "SSL", "ssl.check.hostname": "flase"}, "expected true or false"),
    ({"security.protocol": "SASL_PLAIN"}, "security.protocol='SASL_PLAIN'"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-1",
      "sasl.plain.username": "u", "sasl.plain.password": PASSWORD}, "sasl.mechanism="),
    ({"security.protocol": "SASL_SSL", "sasl.plain.username": "u",
      "sasl.plain.password": PASSWORD}, "needs sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
      "sasl.plain.username": "u"}, "needs sasl.plain.password"),
    # SASL settings with a missing or mistyped protocol: the client used to speak plaintext
    ({"sasl.mechanism": "SCRAM-SHA-512", "sasl.plain.username": "u",
      "sasl.plain.password": PASSWORD}, "security.protocol is PLAINTEXT"),
    ({"security.protocol": "SSL", "sasl.plain.password": PASSWORD}, "security.protocol is SSL"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.plain.username": "u",
      "sasl.plain.password": PASSWORD, "ssl.cafile": "/etc/hostname"},
     "security.protocol is SASL_PLAINTEXT"),
    ({"security.protocol": "SSL", "ssl.cafile": "/no/such/ca.pem"}, "no such file"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/x/truststore.jks"}, "only PEM"),
])
def test_one_strict_normaliser_for_ingest_and_snapshot(options: dict[str, str],
                                                       message: str) -> None:
    """The same refusal, in one line, from the normaliser, the kafka source (ingest) and the
    snapshot's option handling; the password never appears in it."""
    from pipelines.reconcile.snapshot import _client_config

    with pytest.raises(KafkaOptionError, match=message) as direct:
        normalize(options, admin_defaults())
    with pytest.raises(KafkaSourceConfigError) as ingest:
        SourceOptions.from_options({"bootstrap_servers": "b:1",
                                    **{f"kafka.{k}": v for k, v in options.items()}})
    with pytest.raises(KafkaOptionError) as snapshot:
        _client_config(options)
    for error in (direct.value, ingest.value, snapshot.value):
        assert "\n" not in str(error) and PASSWORD not in str(error)
    assert str(ingest.value) == str(direct.value) == str(snapshot.value)


def test_valid_options_in_every_spelling() -> None:
    defaults = admin_defaults()
    typed = normalize({"security.protocol": "sasl_ssl", "sasl_mechanism": "scram-sha-512",
                       "sasl.jaas.config": 'org.apache.kafka.common.security.scram.'
                       f'ScramLoginModule required username="auditor" password="{PASSWORD}";',
                       "ssl.endpoint.identification.algorithm": "",
                       "request.timeout.ms": "5000", "ssl.check.hostname": "TRUE"}, defaults)
    assert typed == {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                     "sasl_plain_username": "auditor", "sasl_plain_password": PASSWORD,
                     "ssl_check_hostname": True, "request_timeout_ms": 5000}
    from pipelines.reconcile.snapshot import _client_config

    with pytest.raises(KafkaOptionError, match=r"unknown Kafka option 'expected\.offsets'"):
        _client_config({"expected_offsets": "g"})  # the capture's lake input, not an option


def test_secrets_from_a_properties_file_and_the_environment(tmp_path: Path) -> None:
    """Kafka's --command-config format (comments, continuations, ':' separators) and
    OFFSETLAKE_KAFKA_OPTION_* env vars; the command line wins, then env, then the file."""
    props = tmp_path / "client.properties"
    props.write_text("# client settings\n! also a comment\n"
                     "security.protocol=SASL_PLAINTEXT\n"
                     "sasl.mechanism : SCRAM-SHA-256\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\\n"
                     f'    required username="from-file" password="{PASSWORD}";\n'
                     "request.timeout.ms=7000\n", encoding="utf-8")
    assert read_properties(props)["sasl.mechanism"] == "SCRAM-SHA-256"
    raw = gather({"request.timeout.ms": "9000"}, props,
                 {"OFFSETLAKE_KAFKA_OPTION_SASL_MECHANISM": "SCRAM-SHA-512", "HOME": "/x"})
    typed = normalize(raw, admin_defaults())
    assert typed["sasl_plain_password"] == PASSWORD
    assert (typed["sasl_mechanism"], typed["request_timeout_ms"]) == ("SCRAM-SHA-512", 9000)
    env_only = normalize(gather({}, None, {
        "OFFSETLAKE_KAFKA_OPTION_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "OFFSETLAKE_KAFKA_OPTION_SASL_MECHANISM": "PLAIN",
        "OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_USERNAME": "u",
        "OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD": PASSWORD}), admin_defaults())
    assert env_only["sasl_plain_password"] == PASSWORD
    with pytest.raises(KafkaOptionError, match="cannot read Kafka options file"):
        gather({}, tmp_path / "missing.properties", {})


def test_a_secret_on_the_command_line_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pipelines.kafka_options"):
        gather({"sasl.plain.password": PASSWORD}, None, {})
    (record,) = [r for r in caplog.records if "command line" in r.getMessage()]
    assert "OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD" in record.getMessage()
    assert PASSWORD not in record.getMessage()


# ----------------------------------------------------------------------------- redaction


def test_redact_masks_secret_keys_and_known_values() -> None:
    redaction.register_secret("another-known-secret")
    text = ("{'sasl_plain_password': 'abc def', 'client_id': 'x'} sasl.jaas.config=Scram "
            'token="t0k" ssl_password: pem-pass and another-known-secret in free text')
    clean = redaction.redact(text)
    for secret in ("abc def", "t0k", "pem-pass", "another-known-secret", "Scram"):
        assert secret not in clean
    assert "'client_id': 'x'" in clean and "'sasl_plain_password': '***'" in clean


@pytest.fixture
def scram_kafka() -> Iterator[FakeKafkaCluster]:
    with FakeKafkaCluster(num_brokers=2, max_lifetime_s=120) as kafka:
        kafka.enable_sasl({"auditor": PASSWORD, "limited": PASSWORD, "nobody": PASSWORD})
        yield kafka


def test_kafka_python_debug_logs_are_redacted(scram_kafka: FakeKafkaCluster) -> None:
    """KafkaAdminClient logs its whole configuration (password included) at DEBUG; the filter
    on the root handler masks it, and the capture still works over SCRAM-SHA-512."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root, kafka_log = logging.getLogger(), logging.getLogger("kafka")
    old_levels = root.level, kafka_log.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    kafka_log.setLevel(logging.DEBUG)  # the CLI quiets it below DEBUG; other tests may have run it
    try:
        redaction.install()
        snapshot = capture_snapshot(scram_kafka.bootstrap_servers, **FAST, **sasl())
    finally:
        root.removeHandler(handler)
        root.setLevel(old_levels[0])
        kafka_log.setLevel(old_levels[1])
    output = stream.getvalue()
    assert "Starting KafkaAdminClient with configuration" in output  # kafka-python's own line
    assert "'sasl_plain_password': '***'" in output
    assert PASSWORD not in output
    assert snapshot.points and not snapshot.partial


# ----------------------------------------------------------------------------- authentication


@pytest.mark.parametrize(("user", "password", "mechanism", "reason"), [
    ("auditor", "wrong-password", "SCRAM-SHA-512", "bad credentials or unknown user"),
    ("intruder", PASSWORD, "SCRAM-SHA-512", "bad credentials or unknown user"),
    ("auditor", PASSWORD, "SCRAM-SHA-256", "SASL mechanism SCRAM-SHA-256 is not enabled"),
    ("auditor", PASSWORD, "PLAIN", "SASL mechanism PLAIN is not enabled"),
])
def test_authentication_failures_are_named_and_fast(user: str, password: str, mechanism: str,
                                                     reason: str) -> None:
    """Snapshot and ingest name the refusal in one line within ~1 s, not "cannot reach
    broker(s) within 10s" after kafka-python's retry loop."""
    with FakeKafkaCluster(num_brokers=1, max_lifetime_s=60) as kafka:
        kafka.enable_sasl({"auditor": PASSWORD}, mechanisms=("SCRAM-SHA-512",))
        started = time.monotonic()
        with pytest.raises(KafkaAuthenticationError, match=reason) as snap:
            capture_snapshot(kafka.bootstrap_servers, **FAST, **sasl(user, password, mechanism))
        snapshot_s = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(KafkaAuthenticationFailed, match=reason) as ingest:
            check_access({"bootstrap_servers": kafka.bootstrap_servers, "connect_timeout_s": "10",
                          **{f"kafka.{k}": v for k, v in sasl(user, password, mechanism).items()}})
        ingest_s = time.monotonic() - started
    assert snapshot_s < 3 and ingest_s < 3, (snapshot_s, ingest_s)
    for error in (snap.value, ingest.value):
        assert "\n" not in str(error) and PASSWORD not in str(error) and password not in str(error)


def _make_certs(tmp: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and one for another host, an unrelated CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def key() -> Any:
        return ec.generate_private_key(ec.SECP256R1())

    def ca(cn: str) -> tuple[Any, Any]:
        k = key()
        cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn))
                .public_key(k.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(days=1))
                .not_valid_after(now + dt.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(k, hashes.SHA256()))
        return k, cert

    def leaf(ca_key: Any, ca_cert: Any, san: x509.GeneralName) -> tuple[Any, Any]:
        k = key()
        cert = (x509.CertificateBuilder().subject_name(name("broker"))
                .issuer_name(ca_cert.subject).public_key(k.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(days=1))
                .not_valid_after(now + dt.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([san]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        return k, cert

    def write(path: Path, *objs: Any) -> Path:
        out = b""
        for obj in objs:
            if hasattr(obj, "private_bytes"):
                out += obj.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption())
            else:
                out += obj.public_bytes(serialization.Encoding.PEM)
        path.write_bytes(out)
        return path

    ca_key, ca_cert = ca("offsetlake test CA")
    _other_key, other_ca = ca("some other CA")
    good_key, good = leaf(ca_key, ca_cert, x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    wrong_key, wrong = leaf(ca_key, ca_cert, x509.DNSName("kafka.other.example"))
    return {"ca": write(tmp / "ca.pem", ca_cert), "other_ca": write(tmp / "other-ca.pem", other_ca),
            "good": write(tmp / "good.pem", good, good_key),
            "wrong_host": write(tmp / "wrong-host.pem", wrong, wrong_key)}


class _TlsListener:
    """A real TLS server on loopback: completes handshakes (then closes), nothing more."""

    def __init__(self, certfile: Path) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(str(certfile))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            try:
                conn.settimeout(2)
                with self.context.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@pytest.mark.parametrize(("server_cert", "ca", "reason"), [
    ("good", "other_ca", "TLS certificate verification failed"),
    ("wrong_host", "ca", "TLS hostname verification failed"),
])
def test_tls_failures_are_named_and_fast(tmp_path: Path, server_cert: str, ca: str,
                                         reason: str) -> None:
    certs = _make_certs(tmp_path)
    listener = _TlsListener(certs[server_cert])
    try:
        servers = f"127.0.0.1:{listener.port}"
        tls = {"security_protocol": "SSL", "ssl_cafile": str(certs[ca])}
        started = time.monotonic()
        with pytest.raises(KafkaAuthenticationError, match=reason):
            capture_snapshot(servers, **FAST, **tls)
        with pytest.raises(KafkaAuthenticationFailed, match=reason):
            check_access({"bootstrap_servers": servers,
                          **{f"kafka.{k}": v for k, v in tls.items()}})
        assert time.monotonic() - started < 5
    finally:
        listener.close()


def test_sasl_ssl_listener_happy_path(tmp_path: Path) -> None:
    """SCRAM-SHA-512 over TLS (certificate for 127.0.0.1 from a CA given as ssl.cafile, the
    hostname checked): snapshot and the ingest access check both work; over the same TLS
    listener an untrusted CA is named, not retried."""
    certs = _make_certs(tmp_path)
    cluster = FakeKafkaCluster(num_brokers=2, max_lifetime_s=60).use_tls(certs["good"])
    with cluster as kafka:
        kafka.enable_sasl({"auditor": PASSWORD})
        kafka.commit("g", "t", 0, 5)
        options = {**sasl(), "security_protocol": "SASL_SSL", "ssl_cafile": str(certs["ca"]),
                   "ssl_check_hostname": "true"}
        snapshot = capture_snapshot(kafka.bootstrap_servers, **FAST, **options)
        assert [(r.group_id, r.committed_offset) for r in snapshot.offsets] == [("g", 5)]
        assert check_access({"bootstrap_servers": kafka.bootstrap_servers,
                             **{f"kafka.{k}": v for k, v in options.items()}}) == [0, 1, 2, 3, 4]
        with pytest.raises(KafkaAuthenticationError, match="certificate verification failed"):
            capture_snapshot(kafka.bootstrap_servers, **FAST,
                             **{**options, "ssl_cafile": str(certs["other_ca"])})


# ----------------------------------------------------------------------------- authorization


def _acl_cluster(kafka: FakeKafkaCluster) -> None:
    """Six groups on two topics; ``limited`` may describe 2 groups and one topic."""
    kafka.add_topic("orders", 2, log_end_offsets=[50, 60])
    kafka.add_topic("payments", 2, log_end_offsets=[70, 80])
    for i in range(6):
        for topic in ("orders", "payments"):
            kafka.commit(f"g{i}", topic, 0, 10 + i)
    kafka.grant("auditor", describe_topics=["*"], read_topics=[OFFSETS_TOPIC],
                describe_groups=["*"])
    kafka.grant("limited", describe_topics=["orders"], describe_groups=["g0", "g1"])
    kafka.grant("nobody")


def _lake_knowledge() -> dict[str, set[tuple[str, int]]]:
    return {f"g{i}": {("orders", 0), ("payments", 0)} for i in range(6)}


def test_snapshot_records_what_acls_hide(scram_kafka: FakeKafkaCluster) -> None:
    _acl_cluster(scram_kafka)
    full = capture_snapshot(scram_kafka.bootstrap_servers, **FAST, **sasl(),
                            expected_offsets=_lake_knowledge())
    assert not full.partial and not full.not_authorized
    assert sum(1 for r in full.offsets if r.error_code == 0) == 12

    limited = capture_snapshot(scram_kafka.bootstrap_servers, **FAST, **sasl("limited"),
                               expected_offsets=_lake_knowledge())
    assert limited.partial
    assert limited.not_authorized == ["group:g2", "group:g3", "group:g4", "group:g5",
                                      f"topic:{OFFSETS_TOPIC}", "topic:payments"]
    assert {g.group_id for g in limited.groups} == {"g0", "g1"}  # ListGroups hid the rest
    refused = {(r.group_id, r.topic, r.error_name) for r in limited.offsets if r.error_code}
    assert ("g0", "payments", "TOPIC_AUTHORIZATION_FAILED") in refused
    assert ("g3", None, "GROUP_AUTHORIZATION_FAILED") in refused

    nobody = capture_snapshot(scram_kafka.bootstrap_servers, **FAST, **sasl("nobody"))
    assert nobody.partial and nobody.not_authorized == [f"topic:{OFFSETS_TOPIC}"]
    assert not nobody.points and any("no snapshot point" in e for e in nobody.errors)


def test_ingest_access_check_names_missing_acls(scram_kafka: FakeKafkaCluster) -> None:
    """Ingest as a principal without DESCRIBE, or without READ, on __consumer_offsets: "not
    authorized", never KafkaTopicNotFound."""
    _acl_cluster(scram_kafka)
    scram_kafka.grant("reader", describe_topics=[OFFSETS_TOPIC])
    scram_kafka.enable_sasl({"auditor": PASSWORD, "limited": PASSWORD, "reader": PASSWORD})

    def options(user: str) -> dict[str, str]:
        return {"bootstrap_servers": scram_kafka.bootstrap_servers,
                **{f"kafka.{k}": v for k, v in sasl(user).items()}}

    assert check_access(options("auditor")) == [0, 1, 2, 3, 4]
    with pytest.raises(KafkaNotAuthorized, match="not authorized to describe"):
        check_access(options("limited"))
    with pytest.raises(KafkaNotAuthorized, match="needs READ"):
        check_access(options("reader"))


def test_reconcile_never_passes_on_a_snapshot_cut_by_acls(scram_kafka: FakeKafkaCluster,
                                                          tmp_path: Path) -> None:
    """take_snapshot as ``limited`` (the lake knows g0..g5 on orders and payments): stored as
    partial; reconcile classifies the hidden rows not_authorized (not missing_on_broker) and
    fails, naming why; --allow-partial accepts them. As ``nobody``: no guessed partition
    count. An empty lake with an empty snapshot: "nothing compared" fails."""
    from pipelines.decode import partition_for
    from pipelines.lake.engines import DeltaRsEngine
    from pipelines.reconcile.reconcile import run_reconcile
    from pipelines.reconcile.snapshot import latest_snapshot, take_snapshot
    from tests.test_reconcile import write_lake

    _acl_cluster(scram_kafka)
    engine = DeltaRsEngine(tmp_path / "lake")
    n = 5  # the fake's __consumer_offsets partitions
    write_lake(engine, "committed_offsets", [
        {"group_id": f"g{i}", "topic": t, "partition": 0, "committed_offset": 10 + i,
         "offsets_partition": partition_for(f"g{i}", n), "offset": 1}
        for i in range(6) for t in ("orders", "payments")])
    write_lake(engine, "consumer_groups", [
        {"group_id": f"g{i}", "group_type": "classic", "group_state": "Empty",
         "protocol_type": "", "offsets_partition": partition_for(f"g{i}", n)} for i in range(6)])
    write_lake(engine, "offsets_raw", [{"offsets_partition": p, "offset": 1} for p in range(n)])

    summary = take_snapshot(engine.root, scram_kafka.bootstrap_servers, engine=engine,
                            kafka_config={**{k: str(v) for k, v in FAST.items()},
                                          **sasl("limited")})
    assert summary["partial"] and "group:g3" in summary["not_authorized"]
    info = latest_snapshot(engine)
    assert info is not None and info.partial and "topic:payments" in info.not_authorized

    result = run_reconcile(engine.root, engine=engine, num_partitions=n, data_docs=False)
    assert not result.passed
    assert any("is partial" in b and "group:g3" in b for b in result.summary["blocked_by"])
    classes = {(r["group_id"], r["topic"]): r["classification"]
               for r in result.reconciliation.table.to_pylist() if r["level"] == "offset"}
    assert classes[("g3", "orders")] == "not_authorized"  # group refused
    assert classes[("g0", "payments")] == "not_authorized"  # topic refused
    assert classes[("g0", "orders")] == "match"
    assert "missing_on_broker" not in classes.values()

    accepted = run_reconcile(engine.root, engine=engine, num_partitions=n, data_docs=False,
                             allow_partial=True)
    assert accepted.passed, accepted.summary
    assert accepted.summary["classes"]["not_authorized"] > 0

    take_snapshot(engine.root, scram_kafka.bootstrap_servers, engine=engine,
                  kafka_config={**{k: str(v) for k, v in FAST.items()}, **sasl("nobody")})
    blind = run_reconcile(engine.root, engine=engine, data_docs=False, allow_partial=True)
    assert not blind.passed and blind.reconciliation.num_partitions is None
    assert any("partition count unknown" in b for b in blind.summary["blocked_by"])
    assert blind.summary["gate"]["ran"] is False  # no partition_for(group, 50) checks

    empty = DeltaRsEngine(tmp_path / "empty-lake")
    with scram_kafka._lock:
        scram_kafka.groups.clear()
        scram_kafka.offsets.clear()
    take_snapshot(empty.root, scram_kafka.bootstrap_servers, engine=empty,
                  kafka_config={**{k: str(v) for k, v in FAST.items()}, **sasl("auditor")})
    nothing = run_reconcile(empty.root, engine=empty, data_docs=False, gate=False)
    assert nothing.reconciliation.table.num_rows == 0 and not nothing.passed
    assert any("nothing compared" in b for b in nothing.summary["blocked_by"])


def test_snapshot_runs_of_an_older_lake_gain_the_new_columns(tmp_path: Path) -> None:
    """A lake whose snapshot_runs predates partial/not_authorized still takes snapshots: the
    nullable columns are added in place, old rows read null (and not partial)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from pipelines.lake.contracts import contract
    from pipelines.lake.engines import DeltaRsEngine
    from pipelines.reconcile.cluster.rows import ClusterSnapshot
    from pipelines.reconcile.snapshot import RUNS_TABLE, _runs, store_snapshot

    engine = DeltaRsEngine(tmp_path / "lake")
    full = contract(RUNS_TABLE).arrow_schema
    old = full.remove(full.get_field_index("not_authorized")).remove(
        full.get_field_index("partial"))
    DeltaTable.create(engine.path(RUNS_TABLE), old)
    now = dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc)
    write_deltalake(engine.path(RUNS_TABLE), pa.Table.from_pylist([{
        "cluster_id": "default", "snapshot_id": "old", "captured_at": now, "source": "t",
        "require_stable": False, "num_groups": 0, "num_members": 0, "num_offsets": 0,
        "num_offset_errors": 0, "num_offsets_partitions": 0, "errors": [],
        "stored_at": now}], schema=old), mode="append")
    store_snapshot(engine, ClusterSnapshot("new", now + dt.timedelta(seconds=1), "t",
                                           not_authorized=["group:g"]))
    runs = {r.snapshot_id: r for r in _runs(engine, "default")}
    assert not runs["old"].partial and runs["new"].partial
    assert runs["new"].not_authorized == ("group:g",)


def test_snapshot_strict_exits_3_on_a_partial_snapshot(scram_kafka: FakeKafkaCluster,
                                                       tmp_path: Path) -> None:
    _acl_cluster(scram_kafka)
    base = ["snapshot", "--bootstrap-servers", scram_kafka.bootstrap_servers,
            "--lake", str(tmp_path / "lake"), "--kafka-option", "security.protocol=SASL_PLAINTEXT",
            "--kafka-option", "sasl.mechanism=SCRAM-SHA-512",
            "--kafka-option", "sasl.plain.username=limited"]
    env = {"OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD": PASSWORD}
    code, out, err, _ = _run_cli([*base, "--strict"], env, timeout_s=60)
    assert code == 3, err
    assert "strict: partial snapshot: not authorized: " in err and PASSWORD not in out + err
    code, out, err, _ = _run_cli(base, env, timeout_s=60)
    assert code == 0 and json.loads(out)["partial"] is True
    assert "partial snapshot" in err  # a warning without --strict


# ----------------------------------------------------------------------------- end to end


def _process_tree_cmdlines(root_pid: int) -> list[str]:
    """Argument lists of ``root_pid`` and all its descendants (Spark's JVM, Python workers)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, frontier = {root_pid}, [root_pid]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    out = []
    for pid in tree:
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                "utf-8", "replace"))
        except OSError:
            continue
    return out


def _run_cli(args: list[str], env: dict[str, str], timeout_s: float = 300
             ) -> tuple[int, str, str, list[str]]:
    """Run the CLI in a subprocess, sampling every process argument list while it runs."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cmdlines: list[str] = []
    outputs: dict[str, str] = {}

    def drain(name: str, stream: Any) -> None:
        outputs[name] = stream.read()

    readers = [threading.Thread(target=drain, args=(n, s), daemon=True)
               for n, s in (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        cmdlines.extend(_process_tree_cmdlines(proc.pid))
        time.sleep(0.5)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for r in readers:
        r.join(10)
    return proc.returncode, outputs.get("out", ""), outputs.get("err", ""), cmdlines


@pytest.mark.slow
def test_no_secret_anywhere_cli_end_to_end(tmp_path: Path) -> None:
    """snapshot and ingest (CLI, subprocesses, --log-level DEBUG) against the SASL/SCRAM broker
    serving a generated cluster history: the test password appears in no log line, summary,
    lake file or process argument list; failures are one named line, exit 2, no traceback."""
    from pipelines.demo import generate_cluster

    data = tmp_path / "data"
    manifest = generate_cluster(data, num_partitions=3, scale=1, seed=7)
    lake = tmp_path / "lake"
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                     f'required username="auditor" password="{PASSWORD}";\n', encoding="utf-8")
    with FakeKafkaCluster(num_brokers=2, offsets_topic_partitions=3,
                          max_lifetime_s=400) as kafka:
        for p in range(3):
            kafka.load_segments(OFFSETS_TOPIC, p, sorted((data / f"{OFFSETS_TOPIC}-{p}").glob(
                "*.log")))
        sizes: dict[str, int] = {}
        for (group, topic, partition), c in sorted(manifest.committed.items()):
            sizes[topic] = max(sizes.get(topic, 0), partition + 1)
            kafka.commit(group, topic, partition, c.offset, leader_epoch=c.leader_epoch,
                         metadata=c.metadata or "")
        for topic, n in sizes.items():
            kafka.add_topic(topic, n, log_end_offsets=10**6)
        kafka.enable_sasl({"auditor": PASSWORD, "limited": PASSWORD})
        kafka.grant("auditor", describe_topics=["*"], read_topics=["*"], describe_groups=["*"])
        kafka.grant("limited", describe_groups=["*"])
        servers = kafka.bootstrap_servers
        common = ["--lake", str(lake), "--cluster-id", "sec"]
        sasl_flags = ["--kafka-option", "security.protocol=SASL_PLAINTEXT",
                      "--kafka-option", "sasl.mechanism=SCRAM-SHA-512",
                      "--kafka-option", "sasl.plain.username=auditor"]
        password_env = {"OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD": PASSWORD}
        runs = {
            "ingest": _run_cli(["--log-level", "DEBUG", "ingest", "--source", "kafka",
                                "--bootstrap-servers", servers, *common, *sasl_flags],
                               password_env),
            "snapshot": _run_cli(["--log-level", "DEBUG", "snapshot", "--bootstrap-servers",
                                  servers, *common, "--kafka-options-file", str(props)], {}),
        }
        started = time.monotonic()
        runs["bad_password"] = _run_cli(
            ["--log-level", "DEBUG", "snapshot", "--bootstrap-servers", servers, *common,
             *sasl_flags], {"OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD": PASSWORD + "x"})
        bad_password_s = time.monotonic() - started
        runs["limited_ingest"] = _run_cli(
            ["--log-level", "DEBUG", "ingest", "--source", "kafka", "--bootstrap-servers",
             servers, "--lake", str(tmp_path / "lake2"), "--cluster-id", "sec",
             "--kafka-option", "security.protocol=SASL_PLAINTEXT",
             "--kafka-option", "sasl.mechanism=SCRAM-SHA-512",
             "--kafka-option", "sasl.plain.username=limited"], password_env)

    code, out, err, _ = runs["ingest"]
    assert code == 0, err[-3000:]
    assert json.loads(out)["records"] > 0
    code, out, err, _ = runs["snapshot"]
    assert code == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["offsets"] > 0 and summary["partial"] is False
    assert "Starting KafkaAdminClient with configuration" in err  # DEBUG really was on

    code, out, err, _ = runs["bad_password"]
    assert code == 2 and "Traceback" not in err and bad_password_s < 30
    (line,) = [x for x in err.splitlines() if x.startswith("offsetlake snapshot: error:")]
    assert "authentication failed" in line and "bad credentials" in line
    code, out, err, _ = runs["limited_ingest"]
    assert code == 2 and "Traceback" not in err, err[-3000:]
    (line,) = [x for x in err.splitlines() if x.startswith("offsetlake ingest: error:")]
    assert "KafkaNotAuthorized" in line and "not authorized" in line

    secret = PASSWORD.encode()
    for name, (_code, out, err, cmdlines) in runs.items():
        assert PASSWORD not in out and PASSWORD not in err, name
        assert cmdlines and not any(PASSWORD in c for c in cmdlines), name
    scanned = 0
    for path in [*lake.rglob("*"), *(tmp_path / "lake2").rglob("*")]:
        if path.is_file():
            scanned += 1
            assert secret not in path.read_bytes(), path
    assert scanned > 20
