"""The columnar decode of offset commits whose strings are not ASCII, beside ASCII ones.

Why: group ids and commit metadata may be any UTF-8 (topic names may not). The decoder
checks every row that holds a byte >= 0x80. It finds those rows from the positions of
those bytes, one row number per byte. Since numpy 2.3, ``np.unique`` finds distinct
integers with a hash table, at ~1 us a value, and it made such a batch ~5x slower to
decode than an ASCII one. ``pipelines.model.distinct_sorted`` sorts instead.

This script times ``decode_offset_commits`` on ``--commits`` generated commits, CPU, best
of ``--repeat``, for two kinds of input:

- ASCII group ids and metadata;
- the same commits with Chinese group ids and metadata.

With ``--baseline`` (an older checkout), its ``pipelines/decode/columnar.py`` runs
alternately on the same input, and the script checks that both trees give the same table.

    python benchmarks/non_ascii_decode.py [--commits 500000] [--repeat 3] [--baseline /tmp/before]

Measured (2026-11-29, 2 cores, 500,000 commits each, two runs of ``--baseline 3855f88``,
whose decoder used ``np.unique``; the same tables):

| input | 3855f88 | now |
|---|---|---|
| non-ASCII | 0.713 / 0.749 s | 0.399 / 0.422 s |
| ASCII | 0.167 / 0.162 s | 0.150 / 0.148 s |
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from pathlib import Path

from state_step import load

REPO = Path(__file__).resolve().parents[1]


def commits(n: int, group: str, metadata: str):
    """(keys, values): ``n`` offset commits (key v1, value v3) of 200 groups."""
    import pyarrow as pa

    def text(s: bytes) -> bytes:
        return struct.pack(">h", len(s)) + s

    groups = [text(f"{group}-{i}".encode()) for i in range(200)]
    meta = text(metadata.encode())
    keys = [struct.pack(">h", 1) + groups[i % 200] + text(b"orders") + struct.pack(">i", i % 12) for i in range(n)]
    values = [struct.pack(">hqi", 3, i, 5) + meta + struct.pack(">q", 1_700_000_000_000 + i) for i in range(n)]
    return pa.array(keys, pa.binary()), pa.array(values, pa.binary())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=500_000, help="commits per input (default 500000)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--baseline", type=Path, help="an older checkout, timed alternately")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from pipelines.decode import columnar

    trees = {"current": columnar}
    if args.baseline:
        trees["baseline"] = load(args.baseline.resolve(), "pipelines/decode/columnar.py")
    inputs = {"ASCII": commits(args.commits, "consumers", "checkpoint"),
              "non-ASCII": commits(args.commits, "消费者组", "检查点")}
    for label, (keys, values) in inputs.items():
        best: dict[str, float] = {}
        out = {}
        for _ in range(args.repeat):
            for name, module in trees.items():
                began = time.process_time()
                out[name] = module.decode_offset_commits(keys, values)
                best[name] = min(time.process_time() - began, best.get(name, float("inf")))
        same = "" if len(out) < 2 else "  (same table)" if out["current"].equals(out["baseline"]) else "  (TABLES DIFFER)"
        ok = out["current"].column("decode_status").to_pylist().count("ok")
        print(f"{label:<10} {ok:,} of {args.commits:,} ok  "
              + "  ".join(f"{name} {seconds:.3f} s" for name, seconds in best.items()) + same)


if __name__ == "__main__":
    main()
