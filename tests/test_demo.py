"""pipelines.demo: the generated history is deterministic, reads back cleanly, puts each group
in its coordinator partition, and its manifest agrees with an independent replay of the bytes.

The replays here are deliberately naive (read_committed fold: last record per key by log
offset, aborted transactions dropped by ``fold_transactions``); the generator bookkeeps with
the coordinator's own rules (pending transactional offsets, "older pending offset loses"), so
agreement cross-checks both the generator's bookkeeping and its bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pipelines.decode import OK, TOMBSTONE, decode_record, encode_key, encode_record, partition_for
from pipelines.demo import (
    Committed,
    DemoManifest,
    generate_cluster,
    main,
)
from pipelines.sources.record_batches.exact_batch import Record
from pipelines.sources.record_batches.exact_reader import read_records
from pipelines.sources.record_batches.writer import NewRecord, encode_batch, encode_pairs_batch
from pipelines.sources.segments.files import find_segments
from tests.support.exact_fold import fold_transactions

Key = tuple[str, str, int]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DemoManifest]:
    out = tmp_path_factory.mktemp("demo")
    return out, generate_cluster(out)


def _partitions(out: Path) -> dict[int, list[Record]]:
    """Every record (data and control) per __consumer_offsets partition, in log order."""
    problems: list = []
    by_partition: dict[int, list[Record]] = {}
    for r in read_records(out, problems=problems):
        by_partition.setdefault(r.offsets_partition, []).append(r)
    assert problems == []
    return by_partition


def _replay_offsets(out: Path) -> tuple[dict[Key, Committed], list[tuple[Key, Committed]]]:
    """Independent replay: per partition drop aborted transactions, then the last offset
    record per (group, topic, partition) by log offset wins and a tombstone deletes."""
    state: dict[Key, Committed] = {}
    aborted: list[tuple[Key, Committed]] = []
    for records in _partitions(out).values():
        fold = fold_transactions(records)
        assert fold.held_back == []  # every transaction the generator opens, it closes
        for r in fold.records:
            d = decode_record(r.key, r.value)
            if d.record_type not in (0, 1):
                continue
            key = (d.key["group"], d.key["topic"], d.key["partition"])
            if d.value is None:
                state.pop(key, None)
            else:
                state[key] = Committed(d.value["offset"], d.value["leader_epoch"],
                                       d.value["metadata"])
        for r in fold.aborted:
            d = decode_record(r.key, r.value)
            aborted.append(((d.key["group"], d.key["topic"], d.key["partition"]),
                            Committed(d.value["offset"], d.value["leader_epoch"],
                                      d.value["metadata"])))
    return state, aborted


def _replay_groups(out: Path) -> dict[str, dict[str, Any]]:
    """Independent replay of group records: the latest value per (type, group, member)."""
    latest: dict[str, dict[tuple[int, str], Any]] = {}
    for records in _partitions(out).values():
        for r in records:
            if r.is_control:
                continue
            d = decode_record(r.key, r.value)
            if d.record_type in (0, 1):
                continue
            recs = latest.setdefault(d.group_id, {})
            sub = d.key.get("member_id", "")
            if d.value is None:
                recs.pop((d.record_type, sub), None)
            else:
                recs[(d.record_type, sub)] = d.value
    return latest


def test_same_seed_gives_identical_bytes(tmp_path: Path, demo: tuple[Path, DemoManifest]) -> None:
    out, manifest = demo
    again = generate_cluster(tmp_path / "again")
    files = sorted(p.relative_to(out) for p in out.rglob("*.log"))
    assert files == sorted(p.relative_to(tmp_path / "again") for p in (tmp_path / "again").rglob("*.log"))
    assert len(files) == manifest.num_partitions
    for f in files:
        assert (out / f).read_bytes() == (tmp_path / "again" / f).read_bytes(), f
    first, second = manifest.to_json(), again.to_json()
    first.pop("out_dir"), second.pop("out_dir")
    assert first == second
    shifted = generate_cluster(tmp_path / "shifted", start_ms=manifest.start_ms + 1000)
    assert shifted.end_ms == manifest.end_ms + 1000 and shifted.committed == manifest.committed
    other = generate_cluster(tmp_path / "other", seed=8)
    assert (tmp_path / "other" / files[0]).read_bytes() != (out / files[0]).read_bytes()
    assert other.committed != manifest.committed


def test_every_record_reads_back_and_decodes(demo: tuple[Path, DemoManifest]) -> None:
    out, manifest = demo
    types: Counter[str] = Counter()
    markers: Counter[str] = Counter()
    total = 0
    for p, records in _partitions(out).items():
        assert [r.offset for r in records] == list(range(len(records))), p
        stamps = [r.timestamp for r in records]
        assert stamps == sorted(stamps), p
        assert manifest.start_ms <= stamps[0] and stamps[-1] <= manifest.end_ms
        assert records[-1].offset + 1 == manifest.partitions[p]["next_offset"]
        for r in records:
            total += 1
            assert r.crc_valid and r.magic == 2
            if r.is_control:
                assert r.compression == "none" and r.is_transactional
                markers[r.control_type] += 1
                continue
            d = decode_record(r.key, r.value)
            assert d.decode_status in (OK, TOMBSTONE), (p, r.offset, d.decode_error)
            # canonical bytes: re-encoding the decoded record gives the same key and value
            assert encode_record(d) == (r.key, r.value), (p, r.offset)
            types[str(d.record_type)] += 1
    counts = manifest.counts
    assert total == counts["records"]
    assert dict(types) == counts["records_by_type"]
    assert markers == Counter(COMMIT=counts["commit_markers"], ABORT=counts["abort_markers"])
    assert set(types) == {"1", "2", "3", "4", "5", "6", "7", "8"}
    assert 2_000 < total < 10_000  # "a few thousand" at scale 1


def test_each_group_lives_in_its_coordinator_partition(demo: tuple[Path, DemoManifest]) -> None:
    out, manifest = demo
    seen: set[str] = set()
    for p, records in _partitions(out).items():
        for r in records:
            if not r.is_control:
                group = decode_record(r.key, r.value).group_id
                assert partition_for(group, manifest.num_partitions) == p, (group, p)
                seen.add(group)
    assert seen == set(manifest.stories)
    for group, g in manifest.groups.items():
        assert g["offsets_partition"] == partition_for(group, manifest.num_partitions)


def test_manifest_offsets_equal_an_independent_replay(demo: tuple[Path, DemoManifest]) -> None:
    out, manifest = demo
    state, aborted = _replay_offsets(out)
    assert state == manifest.committed
    assert Counter((k, c.offset, c.metadata) for k, c in aborted) == Counter(
        ((a.group, a.topic, a.partition), a.offset, a.metadata) for a in manifest.aborted)
    assert len(aborted) > 0
    for a in manifest.aborted:
        final = manifest.committed.get((a.group, a.topic, a.partition))
        assert final is None or final.metadata != a.metadata, a


def test_manifest_groups_equal_an_independent_replay(demo: tuple[Path, DemoManifest]) -> None:
    out, manifest = demo
    latest = _replay_groups(out)
    for group, g in manifest.groups.items():
        recs = latest.get(group, {})
        if g["group_type"] == "classic":
            v = recs[(2, "")]
            assert (v["generation"], v["protocol"], v["leader"]) == (
                g["generation"], g["protocol"], g["leader"])
            assert [m["member_id"] for m in v["members"]] == [m["member_id"] for m in g["members"]]
            assert g["state"] == ("Stable" if v["members"] else "Empty")
        elif g["group_type"] == "consumer":
            assert (2, "") not in recs
            assert recs[(3, "")]["epoch"] == g["group_epoch"]
            assert recs[(6, "")]["assignment_epoch"] == g["assignment_epoch"]
            members = sorted(sub for (t, sub) in recs if t == 5)
            assert members == [m["member_id"] for m in g["members"]]
            for m in g["members"]:
                assert recs[(8, m["member_id"])]["member_epoch"] == m["member_epoch"]
        else:
            assert g["group_type"] == "simple" and not recs
    for group in manifest.deleted_groups:
        assert not latest.get(group), group


def test_stories_end_as_promised(demo: tuple[Path, DemoManifest]) -> None:
    _, m = demo
    g = m.groups

    def state(group: str) -> tuple[str, str]:
        return g[group]["group_type"], g[group]["state"]

    assert state("orders-processor") == ("classic", "Stable")
    assert g["orders-processor"]["generation"] == 5 and len(g["orders-processor"]["members"]) == 3
    assert state("billing-batch") == ("classic", "Empty")
    assert state("payments-static") == ("classic", "Stable")
    assert g["payments-static"]["generation"] == 2
    assert {x["group_instance_id"] for x in g["payments-static"]["members"]} == {
        "payments-static-0", "payments-static-1"}
    assert g["kip70-analytics"]["members"][0]["assignment"] == {"bar": [0, 1], "foo": [0, 1, 2]}
    assert state("spark-ingest") == state("txn-standalone") == ("simple", "Empty")
    assert state("clicks-848") == ("consumer", "Stable")
    assert {x["member_epoch"] for x in g["clicks-848"]["members"]} == {
        g["clicks-848"]["assignment_epoch"]}
    assert state("inventory-848") == ("consumer", "Empty")
    assert state("legacy-upgrade") == state("mixed-migrate") == ("consumer", "Stable")
    assert [x["classic_protocol"] for x in g["mixed-migrate"]["members"]].count(True) == 1
    assert sorted(m.deleted_groups) == ["doomed-848", "doomed-classic"]

    c = m.committed
    assert not [k for k in c if k[0] in m.deleted_groups]
    # KIP-447 interleaving: a transactional offset older than a plain commit loses at COMMIT.
    assert c["txn-pipeline", "orders", 0].metadata == "sync-during-txn-c"
    assert c["txn-pipeline", "orders", 1].metadata == "txn-c"
    assert c["txn-pipeline", "orders", 3].metadata == "sync-during-txn-c"
    assert c["txn-pipeline", "orders", 4].metadata == "txn-d"
    assert sorted(k[2] for k in c if k[0] == "txn-standalone") == [0, 1]
    assert ("reporting-offdel", "orders", 0) not in c
    assert sorted(k[1:] for k in c if k[0] == "reporting-offdel") == [
        ("orders", p) for p in range(1, 6)]
    assert c["legacy-upgrade", "bar", 0].metadata == ""  # KIP-848 era commit won
    assert any(v.leader_epoch >= 0 for k, v in c.items() if k[0] == "clicks-848")


def test_fast_commit_batch_matches_encode_batch() -> None:
    """The generator's commit batches go through the writer's fast path (encode_pairs_batch,
    which replaced the demo's own _commit_batch): the same bytes as encode_batch, also when a
    size is beyond its precomputed varints (where it hands over to encode_batch)."""
    key = encode_key(1, {"group": "g", "topic": "orders", "partition": 3})
    values = [bytes(range(20)) + b"x" * n for n in (0, 100, 300)]
    recs = [NewRecord(100 + i, 1_700_000_000_000, key, v) for i, v in enumerate(values)]
    pairs = [(key, v) for v in values]
    for pid, epoch in ((-1, -1), (4242, 3)):
        assert encode_pairs_batch(
            pairs, base_offset=100, timestamp=1_700_000_000_000, partition_leader_epoch=2,
            producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=pid >= 0,
        ) == encode_batch(
            recs, base_offset=100, partition_leader_epoch=2, producer_id=pid,
            producer_epoch=epoch, base_sequence=0, is_transactional=pid >= 0)
    big = b"x" * 20_000
    assert encode_pairs_batch([(key, big)], base_offset=0, timestamp=1, base_sequence=0) == (
        encode_batch([NewRecord(0, 1, key, big)], base_offset=0, base_sequence=0))


def test_compression_phases_and_segment_roll(tmp_path: Path) -> None:
    m = generate_cluster(tmp_path, num_partitions=3, seed=11, compression=("none", "gzip", "zstd"),
                         segment_bytes=48 * 1024)
    codecs = Counter(r.compression for records in _partitions(tmp_path).values()
                     for r in records if not r.is_control)
    assert set(codecs) == {"none", "gzip", "zstd"}
    assert any(len(pl.segments) > 1 for pl in find_segments(tmp_path))
    state, _ = _replay_offsets(tmp_path)
    assert state == m.committed


def test_manifest_json_and_cli(tmp_path: Path, demo: tuple[Path, DemoManifest],
                               capsys: pytest.CaptureFixture[str]) -> None:
    _, manifest = demo
    doc = json.loads(manifest.write_manifest(tmp_path / "m.json").read_text())
    assert len(doc["committed_offsets"]) == len(manifest.committed)
    assert set(doc["groups"]) == set(manifest.groups)
    assert main([str(tmp_path / "cli"), "--partitions", "50", "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert "records/s" in printed and "clicks-848" in printed
    cli = json.loads((tmp_path / "cli" / "demo-manifest.json").read_text())
    assert cli["num_partitions"] == 50 and cli["seed"] == 3
    assert len(list((tmp_path / "cli").glob("__consumer_offsets-*"))) == 50
