"""Scenarios the project writes itself, laid out like the golden recordings in ../shared.

Why: every guarantee (exactly once, crash replay, the ingest's state equal to the brokers'
answers, the readers' robustness) must be checkable from a clone, where ../shared is absent.
The demo generator writes real segment bytes (several codecs, transactions with aborts,
KIP-848 groups, deletions) with the segment writer, plus the brokers' answers at the end
of the history (``live/``) and its own independent expectation (the manifest).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipelines.demo import generate_cluster

# scenario-a's shape: 5 offsets partitions, codecs switching across broker restarts
PARTITIONS = 5
CODECS = ["none", "gzip", "zstd"]


def generated_scenario(out: Path, *, seed: int = 7, partitions: int = PARTITIONS) -> Path:
    """``out/segments/__consumer_offsets-N``, ``out/live/*.json`` (recorded answers) and
    ``out/manifest.json``, like a golden scenario directory."""
    manifest = generate_cluster(out / "segments", num_partitions=partitions, seed=seed,
                                compression=CODECS)
    shutil.move(str(out / "segments" / "live"), str(out / "live"))
    capture = out / "segments" / "capture_log.json"
    if capture.exists():
        shutil.move(str(capture), str(out / "capture_log.json"))
    manifest.write_manifest(out / "manifest.json")
    return out


def manifest(scenario: Path) -> dict:
    return json.loads((scenario / "manifest.json").read_text())
