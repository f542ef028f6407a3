"""The local JVM's class archive: written once under a temporary name, published only after
a clean exit, mapped by later JVMs, one writer at a time, never for a user's own JVM options;
and Spark's Python processes importing the installed pyspark rather than its source zip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipelines import jvm_cache, spark_python


@pytest.fixture
def spark_home(tmp_path: Path) -> Path:
    """A stand-in SPARK_HOME with a jars directory (the fingerprint lists its jars)."""
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "spark-core.jar").write_bytes(b"jar")
    return home


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], jvm_cache.CACHE_ENV: str(tmp_path / "cache"), **extra}


def test_first_plan_writes_under_a_temporary_name_and_holds_the_lock(tmp_path, spark_home) -> None:
    env = _env(tmp_path)
    first = jvm_cache.plan(env, spark_home)
    assert first is not None and first.writing is not None and first.lock.is_file()
    assert first.writing.name.endswith(f".{os.getpid()}.tmp")
    assert first.writing.parent == first.archive.parent == tmp_path / "cache"
    assert f"-XX:ArchiveClassesAtExit={first.writing}" in first.java_options
    # spark-class's launcher JVM writes its own archive in the same run
    assert first.launcher.writing.name.endswith(f".{os.getpid()}.launcher.tmp")
    assert first.launcher.options.startswith(f"-XX:ArchiveClassesAtExit={first.launcher.writing} ")
    assert first.launcher.archive == first.archive.with_name(first.archive.stem + ".launcher.jsa")
    assert jvm_cache.plan(env, spark_home) is None  # another process is writing it
    jvm_cache.abandon(first)
    assert not first.lock.exists()
    again = jvm_cache.plan(env, spark_home)
    assert again is not None and again.writing is not None


def test_a_published_archive_is_mapped_and_a_stale_lock_is_taken_over(tmp_path, spark_home) -> None:
    env = _env(tmp_path)
    writing = jvm_cache.plan(env, spark_home)
    old = time.time() - jvm_cache.STALE_SECONDS - 60
    os.utime(writing.lock, (old, old))  # its writer died an hour ago
    taken = jvm_cache.plan(env, spark_home)
    assert taken is not None and taken.writing is not None
    taken.archive.write_bytes(b"archive")
    mapped = jvm_cache.plan(env, spark_home)
    assert mapped.writing is None and mapped.archive == taken.archive
    assert mapped.java_options.startswith(f"-XX:SharedArchiveFile={taken.archive} ")
    assert "stderr" in mapped.java_options  # JVM warnings never reach the command's stdout
    # an archive from before the launcher had one: this run writes the launcher's
    assert mapped.launcher.writing is not None and mapped.lock is None
    mapped.launcher.archive.write_bytes(b"launcher archive")
    both = jvm_cache.plan(env, spark_home)
    assert both.writing is None and both.launcher.writing is None
    assert both.launcher.options.startswith(f"-XX:SharedArchiveFile={mapped.launcher.archive} ")
    # spark-class reads the launcher's stdout as the command it runs: warnings go to stderr
    assert "stderr" in both.launcher.options and "stdout" not in both.launcher.options


def test_the_users_launcher_options_are_left_alone(tmp_path, spark_home) -> None:
    env = _env(tmp_path, SPARK_LAUNCHER_OPTS="-Xss4m")
    archive = jvm_cache.plan(env, spark_home)
    assert archive is not None and archive.launcher is None


def test_a_launch_interrupted_by_ctrl_c_keeps_the_archives(tmp_path, spark_home) -> None:
    """Ctrl-C while the JVM starts says nothing of the archives: they stay for the next
    run (removed, the next run was ~3 s slower and wrote one again); a failed launch
    still drops them, and either drops what was being written."""
    env = _env(tmp_path)
    jvm_cache.abandon(first := jvm_cache.plan(env, spark_home))
    first.archive.write_bytes(b"archive")
    writing_launcher = jvm_cache.plan(env, spark_home)
    jvm_cache.abandon(writing_launcher, suspect=False)
    assert first.archive.exists() and not writing_launcher.launcher.writing.exists()
    writing_launcher.launcher.archive.write_bytes(b"launcher archive")
    mapped = jvm_cache.plan(env, spark_home)
    assert mapped.writing is None and mapped.launcher.writing is None
    jvm_cache.abandon(mapped, suspect=False)
    assert mapped.archive.exists() and mapped.launcher.archive.exists()
    jvm_cache.abandon(jvm_cache.plan(env, spark_home))
    assert not mapped.archive.exists() and not mapped.launcher.archive.exists()


def test_a_launcher_archive_is_written_only_where_it_fits(tmp_path, spark_home, monkeypatch) -> None:
    """A JVM that cannot write its archive at exit exits 1, and spark-class fails the launch
    with it: the launcher is asked for one only where its file could be made, with room."""
    env = _env(tmp_path)
    jvm_cache.abandon(first := jvm_cache.plan(env, spark_home))
    first.archive.write_bytes(b"archive")
    mapped = jvm_cache.plan(env, spark_home)  # the JVM's archive, none for the launcher yet
    assert mapped.launcher.writing.is_file() and mapped.launcher.writing.stat().st_size == 0
    jvm_cache.abandon(mapped)
    assert not mapped.launcher.writing.exists()
    first.archive.write_bytes(b"archive")

    full = SimpleNamespace(total=1 << 40, used=(1 << 40) - (1 << 20), free=1 << 20)
    with monkeypatch.context() as patched:
        patched.setattr(jvm_cache.shutil, "disk_usage", lambda path: full)
        assert jvm_cache.plan(env, spark_home).launcher is None  # the JVM's archive still maps
    real_open = os.open

    def refused(path, *args, **kwargs):  # a cache directory this user cannot write to
        if str(path).endswith(".launcher.tmp"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(jvm_cache.os, "open", refused)
    kept = jvm_cache.plan(env, spark_home)
    assert kept.writing is None and kept.launcher is None


def test_a_launcher_that_wrote_nothing_leaves_nothing(tmp_path, spark_home, monkeypatch) -> None:
    # what this test's JVM leaves to publish, not what a real session of the same worker
    # process (an earlier test file's) left
    monkeypatch.setattr(jvm_cache, "_pending", [])
    env = _env(tmp_path)
    jvm_cache.abandon(first := jvm_cache.plan(env, spark_home))
    first.archive.write_bytes(b"archive" * 1024)
    mapping = jvm_cache.plan(env, spark_home)
    with _stand_in_jvm(mapping.archive, maps_it=True) as jvm:
        jvm_cache.started(mapping, jvm)
    assert not mapping.launcher.writing.exists() and not jvm_cache._pending


def test_the_key_follows_java_and_spark_jars_and_off_disables(tmp_path, spark_home) -> None:
    env = _env(tmp_path)
    key = jvm_cache.fingerprint(env, spark_home)
    (spark_home / "jars" / "delta-spark.jar").write_bytes(b"more")
    assert jvm_cache.fingerprint(env, spark_home) != key
    assert jvm_cache.fingerprint(env, spark_home, "-XX:Other") != jvm_cache.fingerprint(env, spark_home)
    assert jvm_cache.fingerprint({**env, "JAVA_HOME": str(tmp_path / "nojava")}, spark_home) is None
    # a scheduler's PATH that finds the same java keeps the key; another java changes it
    now = jvm_cache.fingerprint(env, spark_home)
    assert jvm_cache.fingerprint({**env, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"}, spark_home) == now
    (tmp_path / "bin").mkdir()
    shutil.copy(shutil.which("java", path=env["PATH"]), tmp_path / "bin" / "java")
    assert jvm_cache.fingerprint({**env, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"}, spark_home) != now
    for off in ("off", "OFF", "false", "0"):
        assert jvm_cache.plan({**env, jvm_cache.CACHE_ENV: off}, spark_home) is None


def test_the_key_follows_where_the_jars_are_and_when_they_were_written(tmp_path, spark_home) -> None:
    """The JVM maps an archive only for the jars it was written with (path, size and time);
    one it refuses it ignores without a word, ~3 s slower at every start. A second
    installation of the same Spark (another virtualenv, a CI checkout beside a working one)
    and a reinstall of the same files each get a key of their own."""
    env = _env(tmp_path)
    key = jvm_cache.fingerprint(env, spark_home)
    elsewhere = tmp_path / "other-venv" / "spark"
    shutil.copytree(spark_home, elsewhere)  # the same names, sizes and times; another path
    assert jvm_cache.fingerprint(env, elsewhere) != key
    jar = spark_home / "jars" / "spark-core.jar"
    written = jar.stat()
    os.utime(jar, ns=(written.st_atime_ns, written.st_mtime_ns + 1_000_000_000))  # reinstalled
    assert jar.read_bytes() == b"jar" and jvm_cache.fingerprint(env, spark_home) != key


_STAND_IN_JVM = """
import mmap, sys, time
if sys.argv[1] == "maps":
    fh = open(sys.argv[2], "rb")
    kept = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
print("ready", flush=True)
time.sleep(60)
"""


@contextmanager
def _stand_in_jvm(archive: Path, maps_it: bool, given: bool = True):
    """A process standing for the JVM: given the archive on its command line (or not),
    mapping it (or not)."""
    option = f"-XX:SharedArchiveFile={archive}" if given else "-XX:+UseG1GC"
    process = subprocess.Popen([sys.executable, "-c", _STAND_IN_JVM, "maps" if maps_it else "not",
                                str(archive), option], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        yield SimpleNamespace(pid=process.pid)
    finally:
        process.kill()
        process.wait()


def test_an_archive_the_jvm_did_not_map_is_removed_and_a_mapped_one_is_kept(tmp_path, spark_home) -> None:
    env = _env(tmp_path)
    jvm_cache.abandon(first := jvm_cache.plan(env, spark_home))
    first.archive.write_bytes(b"archive" * 1024)
    first.launcher.archive.write_bytes(b"launcher archive")
    mapping = jvm_cache.plan(env, spark_home)
    assert mapping.writing is None and mapping.launcher.writing is None
    long_ago = time.time() - 7 * 86400
    for archive in (mapping.archive, mapping.launcher.archive):
        os.utime(archive, (long_ago, long_ago))
    with _stand_in_jvm(mapping.archive, maps_it=True) as jvm:
        jvm_cache.started(mapping, jvm)  # mapped, as a JVM that uses the archive maps it
    # the launcher's archive (same Java, same jars; its process is gone) shares the verdict
    for archive in (mapping.archive, mapping.launcher.archive):
        assert archive.is_file() and archive.stat().st_mtime > long_ago + 86400
    with _stand_in_jvm(mapping.archive, maps_it=False, given=False) as launcher:
        jvm_cache.started(mapping, launcher)  # not the JVM given it: nothing to judge by
    assert mapping.archive.is_file() and mapping.launcher.archive.is_file()
    with _stand_in_jvm(mapping.archive, maps_it=False) as jvm:
        jvm_cache.started(mapping, jvm)  # given it, not mapped: the JVM refused it
    assert not mapping.archive.exists() and not mapping.launcher.archive.exists()
    assert jvm_cache.refusals(mapping.archive) == 1
    assert jvm_cache.plan(env, spark_home).writing is not None  # the next run writes one again


def test_a_key_the_jvm_refused_twice_is_not_tried_again_for_a_day(tmp_path, spark_home) -> None:
    """Each try costs ~20 s of CPU at the JVM's exit: an archive it did not write or map twice
    in a row (whatever keeps it from it) is not tried again until a day has passed, or until
    ``offsetlake warm-up`` is asked to write one; one published resets the count."""
    env = _env(tmp_path)
    for _ in range(jvm_cache.REFUSALS):
        plan = jvm_cache.plan(env, spark_home)
        assert plan is not None and plan.writing is not None
        jvm_cache.abandon(plan)
        plan.archive.write_bytes(b"archive")  # published, then not mapped
        mapping = jvm_cache.plan(env, spark_home)
        with _stand_in_jvm(mapping.archive, maps_it=False) as jvm:
            jvm_cache.started(mapping, jvm)
    assert not plan.archive.exists() and jvm_cache.refusals(plan.archive) == jvm_cache.REFUSALS
    assert jvm_cache.plan(env, spark_home) is None
    marker = plan.archive.with_suffix(".refused")
    a_day_ago = time.time() - jvm_cache.REFUSED_SECONDS - 60
    os.utime(marker, (a_day_ago, a_day_ago))
    tried = jvm_cache.plan(env, spark_home)
    assert tried is not None and tried.writing is not None
    jvm_cache.abandon(tried)
    marker.write_text(str(jvm_cache.REFUSALS))
    assert jvm_cache.plan(env, spark_home) is None
    jvm_cache.forget_refusals(tmp_path / "cache")
    assert jvm_cache.plan(env, spark_home).writing is not None


def test_the_users_jvm_options_that_keep_an_archive_off() -> None:
    """System properties (a proxy, a truststore), memory and GC flags keep it; an agent, class
    sharing of their own, the boot class path, a system class loader, options from a file, an
    unreadable value keep it off, and so does a -Xlog read before the command line (the
    archive's quiet log settings would turn it off)."""
    fine = {"SPARK_SUBMIT_OPTS": "-Dhttps.proxyHost=p -Djavax.net.ssl.trustStore='/etc/my store.jks' -Xss4m",
            "spark.driver.extraJavaOptions": "-XX:+UseG1GC -Xlog:gc", "JAVA_TOOL_OPTIONS": "-Dfile.encoding=UTF-8",
            "_JAVA_OPTIONS": "-Xlog:gc"}  # read after the command line: after the archive's log settings
    assert jvm_cache.options_refusal(fine) is None
    for where, value, said in [
            ("SPARK_SUBMIT_OPTS", "-Dx=1 -javaagent:/opt/agent.jar", "-javaagent:/opt/agent.jar in SPARK_SUBMIT_OPTS"),
            ("spark.driver.extraJavaOptions", "-agentlib:jdwp=transport=dt_socket", "-agentlib:jdwp in spark"),
            ("JAVA_TOOL_OPTIONS", "-Xshare:off", "-Xshare:off in JAVA_TOOL_OPTIONS"),
            ("SPARK_SUBMIT_OPTS", "-XX:SharedArchiveFile=/a.jsa", "-XX:SharedArchiveFile in"),
            ("SPARK_SUBMIT_OPTS", "-Xbootclasspath/a:/x.jar", "-Xbootclasspath/a:/x.jar in"),
            ("SPARK_SUBMIT_OPTS", "-Djava.system.class.loader=my.Loader", "-Djava.system.class.loader in"),
            ("JDK_JAVA_OPTIONS", "@/etc/jvm.args", "@/etc/jvm.args in JDK_JAVA_OPTIONS"),
            ("JAVA_TOOL_OPTIONS", "-Xlog:gc", "-Xlog in JAVA_TOOL_OPTIONS"),
            ("_JAVA_OPTIONS", "-javaagent:/a.jar", "-javaagent:/a.jar in _JAVA_OPTIONS"),
            ("SPARK_SUBMIT_OPTS", "-Dx='unclosed", "SPARK_SUBMIT_OPTS does not read as JVM options")]:
        refusal = jvm_cache.options_refusal({**fine, where: value})
        assert refusal is not None and said in refusal, (value, refusal)


def test_the_key_holds_the_users_jvm_options_but_not_their_properties_or_logs(tmp_path, spark_home) -> None:
    env = _env(tmp_path)
    key = jvm_cache.fingerprint(env, spark_home, jvm_cache.key_options("-XX:TieredStopAtLevel=1"))
    assert key == jvm_cache.fingerprint(env, spark_home, "-XX:TieredStopAtLevel=1")  # as before
    per_run = jvm_cache.key_options("-XX:TieredStopAtLevel=1", "-Dport=4041 -Dproxy='a b'", "-Xlog:gc:file=/l/1")
    assert jvm_cache.fingerprint(env, spark_home, per_run) == key
    assert jvm_cache.fingerprint(env, spark_home, jvm_cache.key_options("-XX:TieredStopAtLevel=1", "-Xmx64g")) != key


def test_an_archive_unused_for_a_month_is_removed_when_another_is_written(tmp_path, spark_home) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    unused, recent = cache / "spark-00000000000000000000.jsa", cache / "spark-11111111111111111111.jsa"
    for archive in (unused, recent):
        archive.write_bytes(b"archive")
    long_ago = time.time() - (jvm_cache.UNUSED_DAYS + 1) * 86400
    os.utime(unused, (long_ago, long_ago))
    os.utime(recent, (long_ago + 2 * 86400, long_ago + 2 * 86400))
    assert jvm_cache.plan(_env(tmp_path), spark_home).writing is not None
    assert not unused.exists() and recent.is_file()


def test_an_unwritable_cache_runs_without(tmp_path, spark_home) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert jvm_cache.plan(_env(tmp_path, **{jvm_cache.CACHE_ENV: str(blocker / "jvm")}),
                          spark_home) is None


def test_a_jvm_that_did_not_start_drops_the_archive_it_was_to_map(tmp_path, spark_home) -> None:
    env = _env(tmp_path)
    first = jvm_cache.plan(env, spark_home)
    first.archive.write_bytes(b"damaged")
    jvm_cache.abandon(first)
    mapped = jvm_cache.plan(env, spark_home)
    assert mapped.writing is None
    jvm_cache.abandon(mapped)
    assert not mapped.archive.exists()


_PROBE = """
import json, os
from pipelines.spark import spark_session
spark = spark_session("probe")
assert spark.range(10).count() == 10
jvm = spark._jvm
pid = jvm.java.lang.ProcessHandle.current().pid()
maps = open(f"/proc/{pid}/maps").read()
args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
worker = spark.sparkContext.parallelize([0], 1).map(
    lambda _: (__import__("pyspark").__file__, [p for p in __import__("sys").path if p.endswith(".jar")])).collect()
print(json.dumps({"args": args, "mapped": [a for a in set(maps.split()) if a.endswith(".jsa")],
                  "jvm_pid": pid,
                  "python": spark.sparkContext.pythonExec, "worker_pyspark": worker[0][0],
                  "worker_jars": worker[0][1]}))
spark.stop()
"""


@pytest.mark.slow
def test_a_real_local_jvm_writes_the_archive_once_and_the_next_one_maps_it(tmp_path: Path) -> None:
    run_env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYSPARK_", "SPARK_", "OFFSETLAKE_SPARK"))}
    cache = tmp_path / "cache"
    run_env[jvm_cache.CACHE_ENV] = str(cache)
    hadoop = tmp_path / "hadoop-conf"  # a Hadoop conf dir with files comes after Spark's jars:
    hadoop.mkdir()                     # the archive is written and mapped all the same
    (hadoop / "core-site.xml").write_text("<configuration/>\n")
    run_env["HADOOP_CONF_DIR"] = str(hadoop)

    def probe() -> dict:
        out = subprocess.run([sys.executable, "-c", _PROBE], cwd=tmp_path, env=run_env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.count("\n") == 1, out.stdout  # the JVM printed nothing on stdout
        return json.loads(out.stdout)

    first = probe()
    writing = [a for a in first["args"] if a.startswith("-XX:ArchiveClassesAtExit=")]
    assert len(writing) == 1 and writing[0].endswith(".tmp")
    # the caller read the command's output to its end without waiting for the JVM's dump
    # (seconds of work after the command): that JVM still runs, nothing is published yet
    assert Path(f"/proc/{first['jvm_pid']}").exists()
    def main_archives() -> list[Path]:
        return [a for a in cache.glob("*.jsa") if not a.name.endswith(".launcher.jsa")]

    assert list(cache.glob("*.lock")) and not main_archives()
    deadline = time.monotonic() + 240  # published by a detached process once the JVM is gone
    while (list(cache.glob("*.lock")) or not main_archives()) and time.monotonic() < deadline:
        time.sleep(0.5)
    while len(list(cache.glob("*.jsa"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)  # and spark-class's launcher's (done before the JVM started), by another
    archives = sorted(main_archives())
    assert len(archives) == 1 and archives[0].stat().st_size > 1_000_000
    launcher_archive = archives[0].with_name(archives[0].stem + ".launcher.jsa")
    assert launcher_archive.stat().st_size > 100_000
    assert not list(cache.glob("*.tmp")) and not list(cache.glob("*.lock"))
    assert not list(cache.glob("*.json"))

    published = archives[0].stat().st_mtime
    time.sleep(1.1)
    second = probe()
    assert f"-XX:SharedArchiveFile={archives[0]}" in second["args"]
    assert str(archives[0]) in second["mapped"]  # the JVM really maps Spark's classes from it
    assert archives[0].stat().st_mtime > published  # its use is recorded
    assert launcher_archive.stat().st_mtime > published
    # the workers run this interpreter through the launcher and import the installed pyspark
    assert second["python"] == spark_python.launcher()
    assert ".zip" not in second["worker_pyspark"] and second["worker_pyspark"].endswith(".py")
    # and without Spark's core jar (no Python in it) first on its path
    assert first["worker_jars"] == second["worker_jars"] == []

    # an archive written for another class path (here: a copy of Spark's launcher jar
    # elsewhere, as another installation of Spark) is refused by the JVM without a word;
    # the run goes on without it and removes it, for the next run to write one it maps
    archives[0].unlink()
    import pyspark

    launcher_jar = next((Path(pyspark.__file__).parent / "jars").glob("spark-launcher_*.jar"))
    elsewhere = shutil.copy(launcher_jar, tmp_path)
    java = shutil.which("java", path=run_env.get("PATH"))
    subprocess.run([java, f"-XX:ArchiveClassesAtExit={archives[0]}", "-Xlog:disable", "-cp", elsewhere,
                    "org.apache.spark.launcher.Main"], capture_output=True, timeout=120)  # exits 1: no args
    assert archives[0].stat().st_size > 0
    third = probe()
    assert f"-XX:SharedArchiveFile={archives[0]}" in third["args"]
    assert str(archives[0]) not in third["mapped"]
    assert not archives[0].exists() and not launcher_archive.exists()  # both written again


def test_a_class_path_directory_with_files_runs_without(tmp_path, spark_home) -> None:
    """The JVM cannot archive a class path with a non-empty directory up to the last entry
    it archives classes from (and prints so on stdout): one before Spark's jars, or one
    before ``SPARK_DIST_CLASSPATH``'s jars. A Hadoop conf dir after Spark's jars is fine
    (a real JVM writes and maps the archive with one: the test below)."""
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    env = _env(tmp_path, SPARK_CONF_DIR=str(conf))
    first = jvm_cache.plan(env, spark_home)
    assert first is not None  # an empty conf dir is fine
    jvm_cache.abandon(first)
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    assert jvm_cache.plan(env, spark_home) is None
    hadoop = tmp_path / "hadoop"
    hadoop.mkdir()
    (hadoop / "core-site.xml").write_text("<configuration/>")
    assert jvm_cache.plan(_env(tmp_path), spark_home, extra_class_path=str(hadoop)) is None
    assert jvm_cache.plan(_env(tmp_path, SPARK_CLASSPATH=str(hadoop)), spark_home) is None
    for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):  # after Spark's jars
        after = jvm_cache.plan(_env(tmp_path, **{name: str(hadoop)}), spark_home)
        assert after is not None
        jvm_cache.abandon(after)
        dist = str(spark_home / "jars" / "*")  # jars of its own after it
        assert jvm_cache.plan(_env(tmp_path, **{name: str(hadoop)}, SPARK_DIST_CLASSPATH=dist),
                              spark_home) is None


def test_spark_python_drops_only_zips_that_hold_the_installed_version(tmp_path: Path) -> None:
    import pyspark

    installed = Path(pyspark.__file__).parents[1]  # site-packages, holding pyspark and py4j
    spark_zip = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    if not spark_zip.is_file():
        pytest.skip("this pyspark has no python/lib/pyspark.zip (not a pip-installed pyspark)")
    other = tmp_path / "pyspark.zip"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("pyspark/version.py", '__version__ = "3.5.0"\n')
    path = [str(spark_zip), str(other), str(installed)]
    assert spark_python.redundant_zips(path) == [str(spark_zip)]
    assert spark_python.redundant_zips([str(spark_zip)]) == []  # nothing installed beside it

    # what the JVM's environment gets: this interpreter, and that zip (found and resolved)
    home = tmp_path / "spark-home"
    (home / "python" / "lib").mkdir(parents=True)
    linked = home / "python" / "lib" / "pyspark.zip"
    linked.symlink_to(spark_zip)
    (home / "python" / "lib" / "py4j-0.0-src.zip").write_bytes(other.read_bytes())
    env = spark_python.launcher_env(home, [str(installed)])
    assert env == {"OFFSETLAKE_SPARK_PYTHON": sys.executable,
                   "OFFSETLAKE_SPARK_PYTHON_DROP": os.pathsep.join([str(linked), str(spark_zip)])}

    # the installed launcher runs that interpreter, the same arguments, minus those entries;
    # the others are kept as they are, in order, patterns and spaces included
    launcher = spark_python.launcher()
    assert launcher is not None, "offsetlake-spark-python is installed with the package"
    probe = "import json, os, sys, pyspark; print(json.dumps([sys.argv[1:], pyspark.__file__, " \
            "os.environ['PYTHONPATH'], sys.executable]))"
    kept = [str(other / "x"), str(tmp_path / "a dir" / "*"), str(tmp_path / "[ab]")]
    run_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(spark_zip), kept[0], str(linked), *kept[1:]])}
    out = subprocess.run([launcher, "-c", probe, "a b", "-m", "*"], env=run_env, capture_output=True,
                         text=True, timeout=60, check=True)
    args, imported, pythonpath, executable = json.loads(out.stdout)
    assert args == ["a b", "-m", "*"] and executable == sys.executable
    assert imported == str(Path(pyspark.__file__)) and pythonpath == os.pathsep.join(kept)

    # nothing to drop: PYTHONPATH untouched; no interpreter given: a clear refusal
    out = subprocess.run([launcher, "-c", probe], env={**run_env, "OFFSETLAKE_SPARK_PYTHON_DROP": ""},
                         capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout)[2] == run_env["PYTHONPATH"]
    bare = {k: v for k, v in run_env.items() if k != "OFFSETLAKE_SPARK_PYTHON"}
    out = subprocess.run([launcher, "-c", probe], env=bare, capture_output=True, text=True, timeout=60)
    assert out.returncode == 127 and "OFFSETLAKE_SPARK_PYTHON is not set" in out.stderr


def test_spark_python_drops_the_core_jar_only_when_it_holds_no_python(tmp_path: Path) -> None:
    import pyspark

    # the real one, as pip installs it: classes only
    real = spark_python.pythonless_jars(Path(pyspark.__file__).parent)
    assert [Path(j).name.startswith("spark-core_") for j in real] == [True]
    with zipfile.ZipFile(real[0]) as archive:
        assert not any(n.endswith((".py", ".pyc")) for n in archive.namelist())

    home = tmp_path / "spark-home"
    (home / "jars").mkdir(parents=True)

    def jar(name: str, entries: list[str], comment: bytes = b"") -> Path:
        path = home / "jars" / name
        with zipfile.ZipFile(path, "w") as archive:
            for entry in entries:
                archive.writestr(entry, b"x")
            archive.comment = comment
        return path

    bare = jar("spark-core_2.13-9.9.0.jar", ["META-INF/MANIFEST.MF", "org/apache/spark/SparkContext.class"],
               comment=b"PK\x05\x06 a comment that looks like an end record")
    jar("spark-sql_2.13-9.9.0.jar", ["org/apache/spark/sql/Dataset.class"])  # not on the Python path
    assert spark_python.pythonless_jars(home) == [str(bare)]
    env = spark_python.launcher_env(home, [])
    assert env["OFFSETLAKE_SPARK_PYTHON_DROP"] == str(bare)

    for entries in (["pyspark/__init__.py"], ["pyspark/__pycache__/sql.cpython-311.pyc"]):
        bare.unlink()
        jar("spark-core_2.13-9.9.0.jar", ["org/apache/spark/SparkContext.class", *entries])
        assert spark_python.pythonless_jars(home) == []
    bare.write_bytes(b"not a zip at all")
    assert spark_python.pythonless_jars(home) == []
    bare.write_bytes(b"")
    assert spark_python.pythonless_jars(home) == []
    assert spark_python.pythonless_jars(tmp_path / "no-such-home") == []
    (tmp_path / "home-without-jars").mkdir()
    (tmp_path / "home-without-jars" / "jars").write_text("a file where the jars would be")
    assert spark_python.pythonless_jars(tmp_path / "home-without-jars") == []


def _java_writing_archive(tmp_path: Path, name: str) -> tuple[list[str], Path]:
    """A real, small JVM that wrote a dynamic archive at exit: (its command line, the archive)."""
    java = shutil.which("java")
    classes = tmp_path / "classes"
    classes.mkdir(exist_ok=True)
    archive = tmp_path / f"{name}.tmp"
    command = [str(java), "-cp", str(classes), f"-XX:ArchiveClassesAtExit={archive}",
               "-Xlog:disable", "-version"]
    subprocess.run(command, capture_output=True, check=True, timeout=120)
    return command, archive


def _order(tmp_path: Path, command: list[str], writing: Path) -> Path:
    lock = tmp_path / "spark-key.lock"
    lock.write_text("")
    order = tmp_path / "order.json"
    gone = 2 ** 22 + 1  # above Linux's largest pid: a JVM that has exited
    order.write_text(json.dumps({"pid": gone, "command": command,
                                 "writing": str(writing), "archive": str(tmp_path / "spark-key.jsa"),
                                 "lock": str(lock)}))
    return order


def test_publish_takes_a_sound_archive_and_refuses_a_truncated_one(tmp_path: Path) -> None:
    command, writing = _java_writing_archive(tmp_path, "sound")
    assert writing.stat().st_size > 0
    order = _order(tmp_path, command, writing)
    assert jvm_cache.publish(order) is True
    assert (tmp_path / "spark-key.jsa").is_file()
    assert not writing.exists() and not order.exists() and not (tmp_path / "spark-key.lock").exists()

    (tmp_path / "spark-key.jsa").unlink()
    command, writing = _java_writing_archive(tmp_path, "cut")
    data = writing.read_bytes()
    writing.write_bytes(data[: len(data) // 2])  # what a JVM killed mid-dump leaves
    order = _order(tmp_path, command, writing)
    assert jvm_cache.publish(order) is False
    assert not (tmp_path / "spark-key.jsa").exists()  # a JVM mapping it would crash
    assert jvm_cache.refusals(tmp_path / "spark-key.jsa") == 1  # counted: not tried forever
    assert not writing.exists() and not (tmp_path / "spark-key.lock").exists()
    assert not list(tmp_path.glob("hs_err*")) and not list(Path.cwd().glob("hs_err*"))


def test_the_check_keeps_the_jvm_options_and_drops_its_main_class() -> None:
    command = ["/j/bin/java", "-cp", "/a:/b/*", "-XX:TieredStopAtLevel=1",
               "-XX:ArchiveClassesAtExit=/c/x.tmp", "--add-modules=jdk.incubator.vector",
               "-Xmx4g", "org.apache.spark.deploy.SparkSubmit", "--conf", "a=b", "pyspark-shell"]
    assert jvm_cache.check_command(command, Path("/c/x.tmp")) == [
        "/j/bin/java", "-cp", "/a:/b/*", "-XX:TieredStopAtLevel=1",
        "--add-modules=jdk.incubator.vector", "-Xmx4g", "-Xshare:on",
        "-XX:SharedArchiveFile=/c/x.tmp", "-XX:+PrintSharedArchiveAndExit",
        "-XX:ErrorFile=/dev/null", "-XX:-CreateCoredumpOnCrash", "-version"]


def test_spark_class_launcher_maps_its_archive_and_prints_the_same_command(tmp_path: Path) -> None:
    """The launcher JVM of the installed Spark (its real jars and class path) writes an archive
    :func:`jvm_cache.publish` takes, then maps its classes from it (``-Xshare:on`` fails a JVM
    that cannot) and prints the same command as without: spark-class runs what it prints."""
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(SPARK_HOME=str(home), SPARK_SCALA_VERSION="2.13", SPARK_ENV_LOADED="1",
               **{jvm_cache.CACHE_ENV: str(tmp_path / "cache")})
    writing = jvm_cache.plan(env, home)
    assert writing is not None and writing.launcher.writing is not None
    args = ["org.apache.spark.deploy.SparkSubmit", "--conf", "spark.app.name=x", "pyspark-shell"]
    plain = subprocess.run([*writing.launcher.command, *args], env=env, capture_output=True, timeout=120)
    assert plain.returncode == 0 and b"SparkSubmit" in plain.stdout, plain.stderr[-2000:]

    def launch(options: str, *extra: str) -> subprocess.CompletedProcess:
        java, heap, *rest = writing.launcher.command
        command = [java, heap, *options.split(), *extra, *rest[len(jvm_cache.QUIET_CDS_LOG.split()):]]
        return subprocess.run([*command, *args], env=env, capture_output=True, timeout=120)

    dumped = launch(writing.launcher.options)
    assert dumped.stdout == plain.stdout and dumped.returncode == 0
    order = tmp_path / "launcher-order.json"
    order.write_text(json.dumps({"pid": None, "command": list(writing.launcher.command),
                                 "writing": str(writing.launcher.writing),
                                 "archive": str(writing.launcher.archive), "lock": None}))
    assert jvm_cache.publish(order) is True
    assert writing.launcher.archive.is_file() and not writing.launcher.writing.exists()

    jvm_cache.abandon(writing)  # release the lock; the launcher's archive is published
    mapping = jvm_cache.plan(env, home).launcher
    assert mapping.writing is None and mapping.archive == writing.launcher.archive
    loaded = tmp_path / "classes.log"
    mapped = launch(mapping.options, "-Xshare:on", f"-Xlog:class+load=info:file={loaded}")
    assert mapped.returncode == 0, mapped.stderr[-2000:]
    assert mapped.stdout == plain.stdout
    main = [line for line in loaded.read_text().splitlines() if "org.apache.spark.launcher.Main " in line]
    assert main and "shared objects file (top)" in main[0]
