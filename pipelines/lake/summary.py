"""A short, human-readable account of what is in a lake (used by ``offsetlake demo``)."""

from __future__ import annotations

from pathlib import Path

from pipelines.lake.contracts import contracts
from pipelines.lake.engines import DeltaRsEngine
from pipelines.lake.location import LakeLocation, lake_location


def lake_counts(lake: Path | str | LakeLocation) -> dict[str, int]:
    engine = DeltaRsEngine(lake)
    # row counts from the Delta log's file statistics: no data file is read
    return {name: engine._table(name).count() for name in contracts() if engine.exists(name)}


def print_summary(lake: Path | str | LakeLocation, groups: int = 3) -> None:
    engine = DeltaRsEngine(lake)
    print(f"Delta lake at {lake_location(lake)}")
    for name, rows in lake_counts(lake).items():
        print(f"  {name:<22} {rows:>10,} rows   ({contracts()[name].kind})")
    if not engine.exists("consumer_groups"):
        return
    cg = engine.read("consumer_groups").sort_by("group_id").to_pylist()
    print("\nGroups (type, state, members):")
    for g in cg:
        print(f"  {g['group_id']:<28} {g['group_type']:<9} {g['group_state']:<12} {g['num_members']}")
    offsets = engine.read("committed_offsets").sort_by(
        [("group_id", "ascending"), ("topic", "ascending"), ("partition", "ascending")]).to_pylist()
    shown = [g["group_id"] for g in cg if any(o["group_id"] == g["group_id"] for o in offsets)][:groups]
    for gid in shown:
        print(f"\nCurrent offsets of {gid}:")
        for o in (o for o in offsets if o["group_id"] == gid):
            meta = f"  metadata={o['metadata']!r}" if o["metadata"] else ""
            where = f"{o['topic']}-{o['partition']}"
            print(f"  {where:<16} offset={o['committed_offset']:<9} leader_epoch={o['leader_epoch']:<3}{meta}")
