"""One lake for many clusters: every checkpoint belongs to one (cluster id, source kind,
source identity), a mismatch is refused with one line naming both, and a Kafka log that
lost records past the checkpoint is a data-loss error unless --allow-data-loss.

Why: a checkpoint keeps only partition -> offset. Re-used for a second cluster's segments it
used to write 0 records, exit 0 (5,152 records silently dropped: exactly the generated
scenario below).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.cli import main
from pipelines.ingest import ingest_segments_local
from pipelines.source_identity import (
    CheckpointMismatch,
    SourceIdentity,
    claim,
    default_checkpoint,
    read_identity,
)
from pipelines.sources.segments.files import find_segments
from tests.support.fake_broker import OFFSETS_TOPIC, FakeKafkaCluster
from tests.support.generated import generated_scenario, manifest


def _rows_of(lake: Path, cluster: str) -> int:
    raw = DeltaTable(str(lake / "offsets_raw")).to_pyarrow_table(columns=["cluster_id"])
    return raw.column(0).to_pylist().count(cluster)


def _emitted(scenario: Path) -> int:
    """Records a read_committed reader hands on: data minus aborted, plus the markers."""
    counts = manifest(scenario)
    return counts["counts"]["records"] - len(counts["aborted_commits"])


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("offsetlake ")]


# ----------------------------------------------------------------------------- pure parts


def test_claim_records_the_source_and_refuses_another(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    mine = SourceIdentity("prod", "segments", "/data/prod")
    claim(ckpt, mine)
    assert read_identity(ckpt) == mine
    claim(ckpt, mine)  # the same source again: fine
    other = SourceIdentity("prod", "segments", "/data/staging")
    with pytest.raises(CheckpointMismatch) as err:
        claim(ckpt, other)
    message = str(err.value)
    assert "/data/prod" in message and "/data/staging" in message and "\n" not in message
    with pytest.raises(CheckpointMismatch, match="kafka"):
        claim(ckpt, SourceIdentity("prod", "kafka", "abc"))
    assert read_identity(ckpt) == mine  # never overwritten by a refused source


def test_each_cluster_gets_its_own_default_checkpoint(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    assert default_checkpoint(lake, "a") == lake / "_checkpoints" / "a" / "ingest"
    assert default_checkpoint(lake, "b/c") == lake / "_checkpoints" / "b_c" / "ingest"


def test_an_old_lakes_checkpoint_keeps_being_used_when_it_is_this_clusters(tmp_path: Path) -> None:
    scenario = generated_scenario(tmp_path / "gen")
    lake = tmp_path / "lake"
    legacy = lake / "_checkpoints" / "ingest"
    (legacy / "spark").mkdir(parents=True)  # a checkpoint from before source markers
    ingest_segments_local(scenario / "segments", lake, cluster_id="old")
    assert default_checkpoint(lake, "old") == legacy  # the lake holds only this cluster
    assert default_checkpoint(lake, "new") == lake / "_checkpoints" / "new" / "ingest"
    claim(legacy, SourceIdentity("old", "segments", str((scenario / "segments").resolve())))
    assert default_checkpoint(lake, "old") == legacy  # its marker says so now
    assert default_checkpoint(lake, "other") == lake / "_checkpoints" / "other" / "ingest"


# ----------------------------------------------------------------------------- segments, Spark

@pytest.mark.spark
def test_two_clusters_share_a_lake_and_a_wrong_source_is_refused(spark, tmp_path: Path,
                                                                 capsys) -> None:
    a = generated_scenario(tmp_path / "a", seed=7)
    b = generated_scenario(tmp_path / "b", seed=11)
    lake = tmp_path / "lake"

    def ingest(path: Path, cluster: str) -> int:
        return main(["ingest", "--source", "segments", "--path", str(path / "segments"),
                     "--lake", str(lake), "--cluster-id", cluster])

    assert ingest(a, "a") == 0
    assert ingest(b, "b") == 0  # the second cluster's records all land (they used to be dropped)
    capsys.readouterr()
    assert _rows_of(lake, "a") == _emitted(a)
    assert _rows_of(lake, "b") == _emitted(b)
    assert read_identity(lake / "_checkpoints" / "b" / "ingest").source == \
        str((b / "segments").resolve())

    assert ingest(b, "a") == 2  # cluster a's checkpoint pointed at b's segments
    lines = _error_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert str((a / "segments").resolve()) in lines[0] and str((b / "segments").resolve()) in lines[0]
    assert _rows_of(lake, "a") == _emitted(a)  # nothing written


# ----------------------------------------------------------------------------- Kafka


def _serve(cluster: FakeKafkaCluster, scenario: Path) -> None:
    for plog in find_segments(scenario / "segments"):
        cluster.load_segments(OFFSETS_TOPIC, plog.offsets_partition, [s.path for s in plog.segments])


@pytest.mark.spark
def test_kafka_cluster_identity_and_data_loss(spark, tmp_path: Path, capsys) -> None:
    scenario = generated_scenario(tmp_path / "gen")
    lake = tmp_path / "lake"
    with FakeKafkaCluster(cluster_id="kafka-x", max_lifetime_s=300) as x:
        _serve(x, scenario)

        def ingest(servers: str, *extra: str) -> int:
            return main(["ingest", "--source", "kafka", "--bootstrap-servers", servers,
                         "--lake", str(lake), "--cluster-id", "prod", *extra])

        assert ingest(x.bootstrap_servers) == 0
        capsys.readouterr()
        ckpt = lake / "_checkpoints" / "prod" / "ingest"
        assert read_identity(ckpt) == SourceIdentity("prod", "kafka", "kafka-x")
        first = _rows_of(lake, "prod")
        assert first == _emitted(scenario)

        with FakeKafkaCluster(cluster_id="kafka-y", max_lifetime_s=120) as y:
            _serve(y, scenario)
            assert ingest(y.bootstrap_servers) == 2
            lines = _error_lines(capsys.readouterr().err)
            assert len(lines) == 1 and "kafka-x" in lines[0] and "kafka-y" in lines[0], lines

        # retention moves partition 0's log start past the checkpoint: records lost unseen
        part = x.partition(OFFSETS_TOPIC, 0)
        end = part.log_end_offset
        raw = b"".join(s.path.read_bytes() for s in find_segments(scenario / "segments")[0].segments)
        part.append(raw)
        x.set_watermarks(OFFSETS_TOPIC, 0, log_start_offset=end + 10)
        assert ingest(x.bootstrap_servers) == 2
        lines = _error_lines(capsys.readouterr().err)
        assert len(lines) == 1 and "lost" in lines[0] and "--allow-data-loss" in lines[0], lines
        assert _rows_of(lake, "prod") == first

        assert ingest(x.bootstrap_servers, "--allow-data-loss") == 0
        assert json.loads(capsys.readouterr().out)["records"] > 0
        raw_rows = DeltaTable(str(lake / "offsets_raw")).to_pyarrow_table(
            columns=["offsets_partition", "offset"]).to_pylist()
        again = [r["offset"] for r in raw_rows if r["offsets_partition"] == 0 and r["offset"] >= end]
        assert again and min(again) >= end + 10  # resumed at the log start, nothing invented
