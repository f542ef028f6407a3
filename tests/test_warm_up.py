"""``offsetlake warm-up``: the local JVM's class archive written and in place when the
command returns (a container image's build), mapped by the next run; a clear refusal where
no archive can serve."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYSPARK_", "SPARK_", "OFFSETLAKE_SPARK", "OFFSETLAKE_JVM"))}
    return {**env, "OFFSETLAKE_JVM_CACHE": str(tmp_path / "cache"), **extra}


def _warm_up(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "warm-up"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


_PROBE = """
import json, os
from pipelines.spark import spark_session
spark = spark_session("probe")
jvm = spark._jvm
pid = jvm.java.lang.ProcessHandle.current().pid()
args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
print(json.dumps({"shuffle": spark.conf.get("spark.sql.shuffle.partitions"), "args": args,
                  "mapped": [a for a in set(open(f"/proc/{pid}/maps").read().split()) if a.endswith(".jsa")],
                  "class_path": jvm.java.lang.System.getProperty("java.class.path").split(os.pathsep),
                  "log4j2": jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration().getName(),
                  "env": [os.environ.get(v) for v in ("SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS", "SPARK_SUBMIT_OPTS")]}))
spark.stop()
"""


@pytest.mark.slow
def test_warm_up_leaves_the_archive_in_place_and_the_next_run_maps_it(tmp_path: Path) -> None:
    """Also beside a Spark conf dir holding only a spark-defaults.conf, a log4j2.properties
    (and a template), the common one, which spark-class puts on the JVM's class path where
    the JVM refuses a directory with files: the defaults file is handed over as a properties
    file and the log4j2 file by its path, and their settings still apply (a Spark setting, the driver's memory and options, which spark-class's
    launcher reads); the user's own driver options leave the JVM quiet; and beside their own
    SPARK_SUBMIT_OPTS, whose system properties may change from run to run (a proxy): the
    archive is keyed without them."""
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 7\n"  # read by spark-submit
                                              "spark.driver.memory 3g\n"  # and by its launcher
                                              "spark.driver.extraJavaOptions -Dmine=1\n")  # still quiet
    (conf / "spark-env.sh.template").write_text("# as Spark ships it\n")
    (conf / "log4j2.properties").write_text(  # Spark's warnings to a file of the user's: stderr stays empty
        "name = users-log4j2\nappender.file.type = File\nappender.file.name = file\n"
        f"appender.file.fileName = {tmp_path / 'spark.log'}\nappender.file.layout.type = PatternLayout\n"
        "rootLogger.level = warn\nrootLogger.appenderRef.file.ref = file\n")
    # a proxy in the user's own JVM options, set anew for each run: one archive serves them all
    env = _clean_env(tmp_path, SPARK_CONF_DIR=str(conf), SPARK_SUBMIT_OPTS="-Dhttps.proxyHost=a.example")
    cache = tmp_path / "cache"
    first = _warm_up(tmp_path, env)
    assert first.returncode == 0, first.stderr[-2000:]
    archives = [a for a in cache.glob("spark-*.jsa") if not a.name.endswith(".launcher.jsa")]
    assert len(archives) == 1 and archives[0].stat().st_size > 1_000_000
    assert first.stdout == f"class archive in place: {archives[0]} (written now)\n"
    assert first.stderr == ""  # quiet: nothing but the one line
    # published by the command itself, not by a process left running after it
    assert not list(cache.glob("*.lock")) and not list(cache.glob("*.tmp")) and not list(cache.glob("*.json"))
    assert archives[0].with_name(archives[0].stem + ".launcher.jsa").stat().st_size > 100_000
    assert not list(Path(tmp_path).glob("offsetlake-warm-up-*"))

    # another PATH (a scheduler's) finds the same java: the same archive, mapped, the
    # user's settings in force and their variables left as they were
    env["PATH"] = f"{tmp_path / 'no-such-dir'}{os.pathsep}{env['PATH']}"
    env["SPARK_SUBMIT_OPTS"] = f"-Dhttps.proxyHost=b.example -Xlog:gc:file={tmp_path / 'gc.log'}"
    probe = subprocess.run([sys.executable, "-c", _PROBE], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    got = json.loads(probe.stdout.strip().splitlines()[-1])
    assert str(archives[0]) in got["mapped"] and f"-XX:SharedArchiveFile={archives[0]}" in got["args"]
    assert got["shuffle"] == "7" and "-Xmx3g" in got["args"] and "-Dmine=1" in got["args"]
    assert str(conf) not in {p.rstrip("/") for p in got["class_path"]}
    args = got["args"]  # theirs after the archive's log settings: their GC log is written
    assert args.index("-Dhttps.proxyHost=b.example") > args.index(f"-XX:SharedArchiveFile={archives[0]}")
    assert "Using " in (tmp_path / "gc.log").read_text()
    assert got["log4j2"] == "users-log4j2"  # the user's log4j2 file in force, given by its path
    assert "native-hadoop" in (tmp_path / "spark.log").read_text()  # its warnings where it sends them
    assert got["env"] == [str(conf), None, env["SPARK_SUBMIT_OPTS"]]

    second = _warm_up(tmp_path, env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout == f"class archive in place: {archives[0]} (written before; mapped by this run)\n"
    assert [a for a in cache.glob("spark-*.jsa") if not a.name.endswith(".launcher.jsa")] == archives


@pytest.mark.parametrize("setting, said", [
    ({"OFFSETLAKE_JVM_CACHE": "off"}, "OFFSETLAKE_JVM_CACHE is off"),
    ({"SPARK_SUBMIT_OPTS": "-Dmine=1 -javaagent:/opt/agent.jar"}, "-javaagent:/opt/agent.jar in SPARK_SUBMIT_OPTS"),
    ({"JAVA_TOOL_OPTIONS": "-Xlog:gc"}, "-Xlog in JAVA_TOOL_OPTIONS"),
    ({"OFFSETLAKE_SPARK_MASTER": "spark://127.0.0.1:7077"}, "offsetlake does not launch this JVM"),
    ({"SPARK_CONF_DIR": "CONF"}, "is a directory with files on the JVM's class path before Spark's jars"),
])
def test_warm_up_says_why_no_archive_can_serve(tmp_path: Path, setting: dict[str, str], said: str) -> None:
    """In a fresh process: in this one a test's SparkContext may run, which no warm-up serves."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    (conf / "hive-site.xml").write_text("<configuration/>\n")  # read from the class path
    env = _clean_env(tmp_path, **{k: v.replace("CONF", str(conf)) for k, v in setting.items()})
    out = _warm_up(tmp_path, env)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("offsetlake warm-up: error: no class archive can serve this machine's runs: ")
    assert said in out.stderr and out.stderr.count("\n") == 1
    assert not (tmp_path / "cache").exists()  # nothing was started or written


def test_warm_up_says_so_when_its_cache_cannot_be_written(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        cache = tmp_path / "a-file"  # root writes anywhere: a cache "directory" that is a file
        cache.write_text("")
    else:
        cache = tmp_path / "read-only"
        cache.mkdir(mode=0o555)
    out = _warm_up(tmp_path, _clean_env(tmp_path, OFFSETLAKE_JVM_CACHE=str(cache)))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (f"offsetlake warm-up: error: no class archive can be written: {cache} cannot be "
                          "written here (set OFFSETLAKE_JVM_CACHE to a directory that can)\n")
