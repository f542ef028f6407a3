"""Which source a checkpoint belongs to: (cluster id, source kind, source identity).

Why: Spark's checkpoint keeps only positions (partition -> next offset). Pointed at another
source (another cluster's segments, ``--cluster-id`` at another Kafka cluster) it would
resume at positions that mean nothing there and silently skip records. So every ingest
checkpoint records, beside its app id marker, the source it was made for, and an ingest
whose source differs is refused with one line naming both. Several clusters share one lake,
each with its own default checkpoint ``<lake>/_checkpoints/<cluster id>/ingest``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MARKER = "offsetlake_source.json"
LEGACY_DIR = Path("_checkpoints") / "ingest"  # the one checkpoint of lakes before identities


class CheckpointMismatch(Exception):
    """The checkpoint was made for another source; resuming it would skip or repeat data."""


@dataclass(frozen=True)
class SourceIdentity:
    cluster_id: str  # the name stamped on every row (--cluster-id)
    source_kind: str  # segments | kafka | spark-kafka
    source: str  # the resolved segment root path, or the Kafka cluster id (Metadata)

    def describe(self) -> str:
        what = "segments under" if self.source_kind == "segments" else "Kafka cluster id"
        return f"--cluster-id {self.cluster_id} from {self.source_kind} ({what} {self.source})"


def segments_identity(cluster_id: str, path: str | Path) -> SourceIdentity:
    return SourceIdentity(cluster_id, "segments", str(Path(path).resolve()))


def kafka_identity(cluster_id: str, source_kind: str, bootstrap_servers: str,
                   kafka_options: dict[str, str]) -> SourceIdentity:
    """The Kafka cluster id from a Metadata response (the bootstrap list on brokers too old
    to report one)."""
    from pipelines.sources.kafka.options import SourceOptions
    from pipelines.sources.kafka.wire import KafkaOffsetsClient

    options = {"bootstrap_servers": bootstrap_servers}
    options.update({k if k.startswith("kafka.") else f"kafka.{k}": v for k, v in kafka_options.items()})
    with KafkaOffsetsClient(SourceOptions.from_options(options)) as client:
        client.partitions()  # one Metadata round trip; raises one-line errors when unreachable
        found = client.cluster_id
    return SourceIdentity(cluster_id, source_kind, found or f"bootstrap {bootstrap_servers}")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def default_checkpoint(lake: Path, cluster_id: str) -> Path:
    """``<lake>/_checkpoints/<cluster id>/ingest``; an old lake's ``_checkpoints/ingest``
    keeps being used when it is this cluster's (its marker says so, or, made before markers,
    the lake holds no other cluster's state)."""
    mine = lake / "_checkpoints" / _safe(cluster_id) / "ingest"
    legacy = lake / LEGACY_DIR
    if mine.exists() or not legacy.exists():
        return mine
    stored = read_identity(legacy)
    if stored is not None:
        return legacy if stored.cluster_id == cluster_id else mine
    clusters = lake_clusters(lake)
    return legacy if clusters <= {cluster_id} else mine


def lake_clusters(lake: Path) -> set[str]:
    """Cluster ids in the lake's committed_offsets and consumer_groups (small state tables)."""
    try:
        from deltalake import DeltaTable
    except ImportError:  # pragma: no cover - a dependency
        return set()
    found: set[str] = set()
    for table in ("committed_offsets", "consumer_groups"):
        where = lake / table
        if (where / "_delta_log").exists():
            column = DeltaTable(str(where)).to_pyarrow_table(columns=["cluster_id"]).column(0)
            found.update(v for v in column.unique().to_pylist() if v is not None)
    return found


def read_identity(checkpoint: Path) -> SourceIdentity | None:
    marker = checkpoint / MARKER
    if not marker.exists():
        return None
    return SourceIdentity(**json.loads(marker.read_text()))


def claim(checkpoint: Path, identity: SourceIdentity) -> None:
    """Record ``identity`` in a new checkpoint, or refuse a checkpoint made for another source.

    A checkpoint made before markers existed is adopted (its first source is unknown; the
    default location only picks one that holds this cluster's positions, see
    :func:`default_checkpoint`).
    """
    stored = read_identity(checkpoint)
    if stored == identity:
        return
    if stored is not None:
        raise CheckpointMismatch(
            f"checkpoint {checkpoint} belongs to {stored.describe()}, not {identity.describe()}; "
            "give this source its own --cluster-id (or --checkpoint)")
    checkpoint.mkdir(parents=True, exist_ok=True)
    if (checkpoint / "spark").exists():
        log.warning("checkpoint %s predates source identities: adopting it for %s", checkpoint,
                    identity.describe())
    partial = checkpoint / f".{MARKER}.tmp"
    partial.write_text(json.dumps(asdict(identity), indent=2) + "\n")
    partial.replace(checkpoint / MARKER)
