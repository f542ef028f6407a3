"""Benchmark: ``offsetlake decode`` (JSON lines) and ``decode --stats`` as a user runs them.

Why: issue 9 measures the command against Kafka's ``kafka-dump-log.sh --offsets-decoder`` on
whole-process CPU (JSON lines >= 5x, ``--stats`` >= 20x the JVM tool): the interpreter start,
every import, reading, decoding and writing all count, so this script times fresh processes,
never a function. Each command runs in its own child process (``python -m pipelines.cli``
with stdout to a file); wall time by the clock, CPU time (user + system) from ``wait4``. A
baseline checkout (``--baseline DIR``, e.g. the state before a change) runs the same
commands alternately with this one, so both see the same machine load; best of N each. The
outputs of both checkouts are compared byte for byte (sha256) and the result printed.

``--imports`` also prints, per checkout, which heavy modules each command imported (pandas,
kafka, pyarrow.dataset, ...) and the bare import cost of the command's modules.

``--kafka-home DIR`` (default ``KAFKA_HOME``): Kafka's own ``kafka-dump-log.sh
--offsets-decoder --print-data-log`` runs on the same files in every round too, and each
command's CPU is printed as a multiple of the tool's, beside the issue's goals (JSON lines
>= 5x, ``--stats`` >= 20x); see ``kafka_peer.py``.

    python benchmarks/decode_cli.py                                  # public corpus, best of 5
    python benchmarks/decode_cli.py --baseline /tmp/before --imports
    python benchmarks/decode_cli.py --kafka-home /opt/kafka_2.13-4.2.0 /data/__consumer_offsets-*
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kafka_peer import add_kafka_home, dump_log_tool, run_dump_log, tool_files
from machine_cpu import process_seconds

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "public"
HEAVY = ("pandas", "kafka", "pyarrow.dataset", "pyarrow.acero", "pyspark", "deltalake",
         "great_expectations", "pyarrow.parquet")
COMMANDS = {"json": [], "stats": ["--stats"], "stats-n50": ["--stats", "--num-partitions", "50"]}
#: issue 9's goals: each command's CPU as a multiple of Kafka's tool's (at least)
GOALS = {"json": 5, "stats": 20, "stats-n50": 20}


#: Where the children keep compiled bytecode (set by main; None: as the environment says).
PYCACHE: Path | None = None


def _env(checkout: Path) -> dict[str, str]:
    """The child's environment: ``checkout`` first on the path; with :data:`PYCACHE`, bytecode
    is written and reused there (an installed wheel ships .pyc files; a checkout run with
    PYTHONDONTWRITEBYTECODE=1 compiles every module of the project on each start, ~0.1 s)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(checkout)
    if PYCACHE is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE / checkout.name)
    return env


def run_once(checkout: Path, extra: list[str], paths: list[str], out: Path) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one fresh ``offsetlake decode`` process."""
    cmd = [sys.executable, "-m", "pipelines.cli", "decode", *extra, *paths]
    wall, cpu, code = process_seconds(cmd, out, cwd=checkout, env=_env(checkout), stderr=subprocess.DEVNULL)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} (in {checkout}) exited {code}")
    return wall, cpu


def imported(checkout: Path, extra: list[str], paths: list[str]) -> list[str]:
    """The heavy modules a ``decode`` process has imported when it ends (``main`` as ``run``
    calls it, without ``run``'s final ``os._exit``)."""
    probe = ("import sys, runpy, atexit, os\n"
             "def report():\n"
             f"    names = [m for m in {HEAVY!r} if m in sys.modules]\n"
             "    os.write(2, ('MODULES ' + ','.join(names) + '\\n').encode())\n"
             "import inspect, pipelines.cli as c\n"
             f"argv = ['decode', *{extra!r}, *{paths!r}]\n"
             "standalone = 'standalone' in inspect.signature(c.main).parameters\n"
             "code = c.main(argv, standalone=True) if standalone else c.main(argv)\n"
             "report()\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=checkout, env=_env(checkout),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          check=True)
    line = [s for s in done.stderr.splitlines() if s.startswith("MODULES ")][-1]
    return [m for m in line[len("MODULES "):].split(",") if m]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _records(path: Path) -> int:
    with path.open("rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", default=[str(CORPUS)], help="segment files or directories")
    ap.add_argument("--baseline", type=Path, help="a checkout to run alternately (e.g. /tmp/before)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per command and checkout (best of)")
    ap.add_argument("--imports", action="store_true", help="list heavy modules each run imported")
    ap.add_argument("--commands", default=",".join(COMMANDS),
                    help=f"comma-separated subset of {','.join(COMMANDS)}")
    add_kafka_home(ap)
    ap.add_argument("--no-bytecode", action="store_true",
                    help="compile from source in every run, as PYTHONDONTWRITEBYTECODE=1 "
                         "does (default: bytecode cached in a temp dir, as an installed wheel)")
    args = ap.parse_args(argv)
    tool = dump_log_tool(args.kafka_home)
    global PYCACHE
    checkouts = {"current": REPO}
    if args.baseline:
        checkouts = {"baseline": args.baseline.resolve(), "current": REPO}
    with tempfile.TemporaryDirectory(prefix="decode-cli-") as tmp:
        if not args.no_bytecode:
            PYCACHE = Path(tmp) / "pycache"
            for checkout in checkouts.values():  # warm-up: writes the bytecode
                run_once(checkout, ["--stats"], args.paths, Path(tmp) / "warm.out")
        print(f"bytecode: {'compiled in every run' if args.no_bytecode else 'cached (warm)'}")
        files = tool_files(args.paths, Path(tmp) / "peer-files") if tool else []
        print(f"Kafka's tool: {tool} on {len(files)} segment files" if tool else
              "Kafka's tool: none (--kafka-home or KAFKA_HOME to measure the issue's ratios)")
        for command in args.commands.split(","):
            extra = COMMANDS[command]
            best: dict[str, tuple[float, float]] = {}
            digests: dict[str, str] = {}
            records = 0
            peer: tuple[float, float, int] | None = None
            for _ in range(args.repeat):
                for name, checkout in checkouts.items():  # alternately: same machine load
                    out = Path(tmp) / f"{name}.out"
                    wall, cpu = run_once(checkout, extra, args.paths, out)
                    w, c = best.get(name, (float("inf"), float("inf")))
                    best[name] = (min(w, wall), min(c, cpu))
                    digests[name] = _digest(out)
                    if command == "json":
                        records = _records(out)
                if tool:
                    wall, cpu, printed = run_dump_log(tool, files, Path(tmp) / "kafka.out")
                    peer = (min(wall, peer[0]), min(cpu, peer[1]), printed) if peer else (wall, cpu, printed)
            print(f"decode {' '.join(extra) or '(JSON lines)'}: best of {args.repeat}"
                  + (f", {records} records" if records else ""))
            for name, (wall, cpu) in best.items():
                rate = f"  {records / cpu:10,.0f} records/CPU-s" if records else ""
                print(f"  {name:9s} wall {wall:6.3f} s  CPU {cpu:6.3f} s{rate}  "
                      f"output sha256 {digests[name]}")
            if peer:
                print(f"  {'Kafka':9s} wall {peer[0]:6.3f} s  CPU {peer[1]:6.3f} s  "
                      f"(kafka-dump-log --offsets-decoder --print-data-log, {peer[2]} records)")
                for name, (wall, cpu) in best.items():
                    print(f"  {name:9s} vs Kafka: CPU {peer[1] / cpu:5.2f}x  wall {peer[0] / wall:5.2f}x "
                          f"(issue 9 goal: CPU >= {GOALS[command]}x)")
            if len(best) == 2:
                (bw, bc), (cw, cc) = best["baseline"], best["current"]
                same = "identical" if digests["baseline"] == digests["current"] else "DIFFERENT"
                print(f"  speed-up  wall {bw / cw:5.2f}x  CPU {bc / cc:5.2f}x  outputs {same}")
            if args.imports:
                for name, checkout in checkouts.items():
                    mods = imported(checkout, extra, args.paths)
                    print(f"  {name:9s} imported: {', '.join(mods) or 'none of ' + ','.join(HEAVY)}")


if __name__ == "__main__":
    main()
