"""``generate_cluster(group_heavy=N)``: a history where group records are a large share (issue
9, benchmark (b)), whose manifest agrees with the records actually written, deterministic.
(The default output is unchanged by the option: checked by ``diff -r`` of generated trees
before/after, reported in the commit.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from pipelines.decode import OK, TOMBSTONE, decode_record
from pipelines.demo import DemoManifest, generate_cluster
from pipelines.sources.record_batches.exact_reader import read_records

GROUP_TYPES = frozenset(range(2, 24))


@pytest.fixture(scope="module")
def heavy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DemoManifest]:
    out = tmp_path_factory.mktemp("heavy")
    return out, generate_cluster(out, scale=1, group_heavy=80, live=False)


def _latest(out: Path) -> tuple[Counter, dict[str, dict[tuple[int, str], dict | None]]]:
    """Record types written, and per group the last value of each (type, member) key."""
    problems: list = []
    types: Counter = Counter()
    latest: dict[str, dict[tuple[int, str], dict | None]] = {}
    for r in read_records(out, problems=problems):
        if r.batch.is_control:
            continue
        d = decode_record(r.key, r.value)
        assert d.decode_status in (OK, TOMBSTONE), d
        types[d.record_type] += 1
        if d.record_type in GROUP_TYPES:
            sub = d.key.get("member_id", "")
            latest.setdefault(d.group_id, {})[(d.record_type, sub)] = d.value
    assert problems == []
    return types, latest


def test_group_records_are_a_large_share(heavy: tuple[Path, DemoManifest]) -> None:
    out, manifest = heavy
    types, _ = _latest(out)
    group = sum(n for t, n in types.items() if t in GROUP_TYPES)
    assert group / sum(types.values()) >= 0.30
    assert types[2] > 400 and types[3] > 400 and types[5] > 400 and types[8] > 1000
    churn = [g for g in manifest.groups if g.startswith("churn-")]
    assert len(churn) == 80 and all(manifest.groups[g]["story"] for g in churn)


def test_churn_groups_in_manifest_equal_their_last_records(heavy: tuple[Path, DemoManifest]
                                                          ) -> None:
    out, manifest = heavy
    _, latest = _latest(out)
    for name, g in manifest.groups.items():
        if not name.startswith("churn-"):
            continue
        recs = latest[name]
        if g["group_type"] == "classic":
            v = recs[(2, "")]
            assert v["generation"] == g["generation"] > 10
            assert [m["member_id"] for m in v["members"]] == [m["member_id"] for m in g["members"]]
        else:
            assert g["group_type"] == "consumer"
            assert recs[(3, "")]["epoch"] == g["group_epoch"] > 10
            live = sorted(sub for (t, sub), v in recs.items() if t == 5 and v is not None)
            assert live == sorted(m["member_id"] for m in g["members"])


def test_group_heavy_is_deterministic(tmp_path: Path, heavy: tuple[Path, DemoManifest]) -> None:
    out, _ = heavy
    again = generate_cluster(tmp_path, scale=1, group_heavy=80, live=False)
    assert again.counts == heavy[1].counts
    for seg in sorted(out.glob("__consumer_offsets-*/*.log")):
        assert (tmp_path / seg.parent.name / seg.name).read_bytes() == seg.read_bytes(), seg
