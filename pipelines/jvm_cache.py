"""A class-data-sharing archive of Spark's classes for the local JVM this process launches.

A local Spark JVM loads and verifies tens of thousands of classes from Spark's jars at every
start and on the first query: ~3 s of a short scheduled run (``benchmarks/real_workload.py``).
The JVM (JDK 13+, AppCDS) can map them from an archive instead. The first run without an
archive asks its JVM to write one when it exits (~20 s of that JVM's CPU, after the run: the
command does not wait for it); later runs with the same Java and the same Spark jars map it.
The archive is written under a temporary name and published by a detached process only
once the JVM has exited and a JVM with the same options maps it cleanly: the JVM crashes on
a truncated archive, so a partial one is never used. One process at a time writes (a lock
file); the others just run without. Where the machine ends with the run (a container per
task), the archive is simply never published and nothing is lost.

The JVM maps an archive only for the class path it was written with: every jar's path, size
and modification time. One it refuses, it ignores without a word and starts ~3 s slower (the
real workload of ``benchmarks/real_workload.py``: 8.1-8.5 s against 5.0-5.7 s), so the key
holds all of these (another installation of the same Spark, a reinstall, is another key), and
an archive the JVM did not map after all is removed, for the next run to write one it maps.
An archive not mapped for ``UNUSED_DAYS`` is removed when another is written.

spark-class first runs a small launcher JVM that only prints the real JVM's command; it
searches Spark's ~280 jars for its classes and took 0.15-0.3 s of every start. It gets an
archive of its own (``spark-<key>.launcher.jsa``, ~1.3 MB, through ``SPARK_LAUNCHER_OPTS``),
written by the first run that finds none and published the same way: 0.05 s then.

``OFFSETLAKE_JVM_CACHE``: ``off`` disables it, a directory moves it (default
``$XDG_CACHE_HOME/offsetlake/jvm`` or ``~/.cache/offsetlake/jvm``; an archive is ~150 MB).
Never used for a JVM the user started (spark-submit) or gave an option that keeps the JVM
from mapping one (:func:`options_refusal`; their other options are keyed, :func:`key_options`),
nor when a directory with files is on the JVM's class path before Spark's jars (a
``SPARK_CONF_DIR`` holding more than a ``spark-defaults.conf`` and a log4j2 file:
:func:`conf_dir_handover`): the
JVM cannot archive such a class path (:func:`class_path_directories`).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_ENV = "OFFSETLAKE_JVM_CACHE"
OFF = ("off", "false", "0", "no", "none")
#: a lock or temporary archive older than this was left by a process that died
STALE_SECONDS = 3600
#: an archive no JVM mapped for this long (a removed installation, an old Spark) is removed
UNUSED_DAYS = 30
#: free space a launcher's archive (~1.3 MB) must find: a JVM that cannot write it exits 1
LAUNCHER_ROOM = 32 * 1024 * 1024
#: JVM log settings with an archive: its warnings (a mismatched archive is simply not used)
#: go to stderr and CDS' own are dropped, so nothing reaches the command's stdout
QUIET_CDS_LOG = "-Xlog:disable -Xlog:all=warning:stderr -Xlog:cds*=error:stderr"
#: environment variables that shape the JVM's class path (spark-class's launcher). Not PATH:
#: the java it finds there is keyed by its real path, and a scheduler's PATH differs from a
#: shell's (an archive written by ``offsetlake warm-up`` in an image's build must still fit)
CLASSPATH_ENV = ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR",
                 "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH", "JAVA_HOME")
#: where the java launcher and the JVM read options from beside the command line (the first
#: two before it, the last after it)
OPTION_ENV = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")
#: JVM options beside which no archive is used: an agent, class sharing of the user's own,
#: the boot class path or a system class loader (the JVM then maps no application class),
#: options read from a file (not seen here)
ARCHIVE_BREAKING = ("-javaagent:", "-agentlib:", "-agentpath:", "-Xshare:", "-Xbootclasspath",
                    "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-XX:SharedClassListFile",
                    "-XX:DumpLoadedClassList", "-XX:+UseSharedSpaces", "-XX:-UseSharedSpaces",
                    "-XX:SharedBaseAddress", "-XX:+AutoCreateSharedArchive", "-XX:+RecordDynamicDumpInfo",
                    "-XX:Flags=", "-XX:VMOptionsFile=", "-Djava.system.class.loader=", "@")
#: a key whose archive the JVM did not write or map this many times in a row is not tried
#: again for REFUSED_SECONDS: each try costs ~20 s of CPU at the JVM's exit
REFUSALS = 2
REFUSED_SECONDS = 86400


@dataclass(frozen=True)
class ArchivePlan:
    """What the JVM to launch does with the archive: map it, or write it at exit."""

    archive: Path
    writing: Path | None = None  # the temporary file the JVM writes (None: it maps archive)
    lock: Path | None = None
    #: spark-class's launcher JVM (its archive, or None: no launcher options)
    launcher: LauncherPlan | None = None

    @property
    def java_options(self) -> str:
        return _cds_options(self.archive, self.writing)


@dataclass(frozen=True)
class LauncherPlan:
    """The archive of spark-class's launcher JVM: map it, or write it (at that JVM's exit,
    before the real JVM starts) under a temporary name for :func:`publish`."""

    archive: Path
    command: tuple[str, ...]  # the launcher's java, options and class path (for the check)
    writing: Path | None = None

    @property
    def options(self) -> str:
        """``SPARK_LAUNCHER_OPTS``: spark-class reads the launcher's stdout as the command to
        run, so every JVM message goes to stderr."""
        return _cds_options(self.archive, self.writing)


def _cds_options(archive: Path, writing: Path | None) -> str:
    """A JVM's options to map ``archive``, or to write ``writing`` at exit; quiet on stdout."""
    if writing is None:
        return f"-XX:SharedArchiveFile={archive} {QUIET_CDS_LOG}"
    return f"-XX:ArchiveClassesAtExit={writing} {QUIET_CDS_LOG}"


def cache_dir(env: Mapping[str, str]) -> Path | None:
    setting = env.get(CACHE_ENV, "").strip()
    if setting.lower() in OFF:
        return None
    if setting:
        return Path(setting)
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "offsetlake" / "jvm"


def _java(env: Mapping[str, str]) -> Path | None:
    if env.get("JAVA_HOME"):
        candidate = Path(env["JAVA_HOME"]) / "bin" / "java"
        return candidate if candidate.is_file() else None
    found = shutil.which("java", path=env.get("PATH"))
    return Path(found) if found else None


def options_refusal(options: Mapping[str, str]) -> str | None:
    """Why JVM options (where they are set -> their value) keep the archive off
    (:data:`ARCHIVE_BREAKING`), or None."""
    for where, value in options.items():
        try:
            tokens = shlex.split(value)
        except ValueError:
            return f"{where} does not read as JVM options: the class archive is off beside it"
        for token in tokens:
            if token.startswith(ARCHIVE_BREAKING):
                return (f"{token.split('=')[0]} in {where} (an agent, class sharing, the boot class path, "
                        "a system class loader, or options from a file) keeps the class archive off")
            if token.startswith("-Xlog") and where in OPTION_ENV[:2]:  # read before the command line's
                return (f"{token.split(':')[0]} in {where} keeps the class archive off (its quiet "
                        "log settings, on the command line, would turn yours off)")
    return None


def key_options(*options: str) -> str:
    """JVM options as an archive's key holds them: without system properties (``-D``) and log
    settings (``-Xlog``), which change nothing the JVM maps, so that one set anew for each run
    (a port, a log file's path) does not make each run write an archive of its own (~150 MB,
    ~20 s of CPU)."""
    return shlex.join(t for value in options for t in shlex.split(value) if not t.startswith(("-D", "-Xlog")))


def fingerprint(env: Mapping[str, str], spark_home: Path, extra: str = "") -> str | None:
    """A key for the archive: the Java binary, the JVM options, the class-path settings and
    what the JVM checks of each of Spark's jars (its path, size and modification time), so a
    second installation of the same Spark or a reinstall gets an archive of its own instead
    of one its JVM refuses (None when there is no java to key on)."""
    java = _java(env)
    jars = spark_home / "jars"
    if java is None or not jars.is_dir():
        return None
    real = java.resolve()
    parts = [str(real), str(real.stat().st_size), str(real.stat().st_mtime_ns), extra, str(jars)]
    parts += [f"{k}={env.get(k, '')}" for k in CLASSPATH_ENV]
    stats = ((p.name, p.stat()) for p in jars.iterdir())
    parts += sorted(f"{name}:{st.st_size}:{st.st_mtime_ns}" for name, st in stats)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def _stale(path: Path, seconds: float = STALE_SECONDS) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except FileNotFoundError:
        return False


def class_path_directories(env: Mapping[str, str], spark_home: Path,
                           extra_class_path: str = "") -> list[Path]:
    """The directories of the JVM's class path that must be empty for an archive: those
    spark-class's launcher puts before Spark's jars (``SPARK_CLASSPATH``,
    ``spark.driver.extraClassPath``, its conf dir), and Hadoop's and YARN's conf dirs, which
    it puts after them, only when ``SPARK_DIST_CLASSPATH`` follows.

    Why: the JVM refuses a non-empty directory only up to the last class path entry it
    archived a class from (Spark's jars, or a jar of ``SPARK_DIST_CLASSPATH``). A Hadoop conf
    dir with files after Spark's jars is archived and mapped like no conf dir at all (the
    real workload: 6.0-7.5 s with the archive, 10.5-11.3 s without it)."""
    conf = env.get("SPARK_CONF_DIR") or str(spark_home / "conf")
    dist = [e for e in env.get("SPARK_DIST_CLASSPATH", "").split(os.pathsep) if e]
    entries = [*env.get("SPARK_CLASSPATH", "").split(os.pathsep), *extra_class_path.split(os.pathsep), conf,
               *([env.get("HADOOP_CONF_DIR", ""), env.get("YARN_CONF_DIR", ""), *dist] if dist else [])]
    return [Path(e) for e in entries if e and not e.endswith("*") and Path(e).is_dir()]


def why_not(env: Mapping[str, str], spark_home: Path, extra_class_path: str = "") -> str | None:
    """Why no archive can serve a JVM launched with ``env`` (None: one can)."""
    if cache_dir(env) is None:
        return f"{CACHE_ENV} is off"
    full = [d for d in class_path_directories(env, spark_home, extra_class_path) if any(d.iterdir())]
    if full:  # the JVM would say so on stdout, where the command's own output goes
        return f"{full[0]} is a directory with files on the JVM's class path before Spark's jars"
    if _java(env) is None or not (spark_home / "jars").is_dir():
        return f"no java (JAVA_HOME, PATH) or no jars in {spark_home} to key it on"
    return None


#: the files a Spark conf dir may hold, beside Spark's templates, for :func:`conf_dir_handover`:
#: the defaults file and one log4j2 file
_DEFAULTS = "spark-defaults.conf"
_LOG4J2 = ("log4j2.properties", "log4j2.xml")


def conf_dir_handover(env: Mapping[str, str], spark_home: Path, jvm_options: str = "") -> dict[str, str]:
    """Launch variables that keep the archive beside a Spark conf dir holding only a
    ``spark-defaults.conf``, a ``log4j2.properties`` (or ``.xml``) and Spark's ``*.template``
    files (or only those, as a Spark distribution ships it): the defaults file handed to
    spark-submit as ``--properties-file``, the log4j2 file as ``-Dlog4j2.configurationFile``
    in ``SPARK_SUBMIT_OPTS``, and
    an empty conf dir of ours in its place ({} where that would not be the same launch).

    Why: spark-class puts the conf dir on the JVM's class path before Spark's jars, where the
    JVM refuses a directory with files, so the common conf dir with one defaults file cost
    every local run its archive (the real workload 10.1-12.7 s against 5.4-5.9 s). Spark
    reads that file only by its path (the launcher for the driver's memory, options and class
    path; spark-submit for the settings), and reads a ``--properties-file`` the same way
    instead of it. log4j2 looks for its file on the class path only when no
    ``log4j2.configurationFile`` is given, so the same file given by its path is the same
    configuration (not where the user names one: ``jvm_options``, all of their own, or
    ``LOG4J_CONFIGURATION_FILE``; which of two names wins is log4j2's to say). A conf dir holding
    anything else (``spark-env.sh``, which spark-class sources, Hadoop's, Hive's or the
    metrics' files, read from the class path) stays as it is, and so does a launch given its
    own ``--properties-file`` or ``--load-spark-defaults``."""
    conf = Path(env.get("SPARK_CONF_DIR") or spark_home / "conf")
    cache = cache_dir(env)
    try:
        names = [p.name for p in conf.iterdir()] if conf.is_dir() else []
    except OSError:
        return {}
    log4j2 = [n for n in names if n in _LOG4J2]
    named = "log4j.configurationFile=" in jvm_options or "log4j2.configurationFile=" in jvm_options \
        or bool(env.get("LOG4J_CONFIGURATION_FILE"))
    if cache is None or not names or len(log4j2) > 1 or (log4j2 and named) \
            or any(n not in (_DEFAULTS, *_LOG4J2) and not n.endswith(".template") for n in names) \
            or any(not (conf / n).is_file() for n in names if not n.endswith(".template")):
        return {}
    args = shlex.split(env.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    if _DEFAULTS in names and any(a.split("=")[0] in ("--properties-file", "--load-spark-defaults")
                                  for a in args):
        return {}
    empty = cache / "empty-spark-conf"
    try:
        empty.mkdir(parents=True, exist_ok=True)
        if any(empty.iterdir()):
            return {}
    except OSError:
        return {}
    handover = {"SPARK_CONF_DIR": str(empty)}
    if _DEFAULTS in names:
        handover["PYSPARK_SUBMIT_ARGS"] = shlex.join(["--properties-file", str(conf / _DEFAULTS), *args])
    if log4j2:
        handover["SPARK_SUBMIT_OPTS"] = f"-Dlog4j2.configurationFile={shlex.quote(str(conf / log4j2[0]))}"
    return handover


#: the archives this process planned (:func:`planned`)
_planned: list[ArchivePlan] = []


def planned() -> list[ArchivePlan]:
    """The archives :func:`plan` gave this process's JVMs, oldest first."""
    return list(_planned)


def plan(env: Mapping[str, str], spark_home: Path, extra: str = "",
         extra_class_path: str = "") -> ArchivePlan | None:
    """Map the archive if there is one; else write it, if no other process is writing it.

    None (run without) when :func:`why_not` says so, or another process writes it.
    """
    if why_not(env, spark_home, extra_class_path) is not None:
        return None
    directory, key = cache_dir(env), fingerprint(env, spark_home, extra)
    if directory is None or key is None:
        return None
    archive = directory / f"spark-{key}.jsa"
    if archive.is_file():
        _planned.append(ArchivePlan(archive, launcher=_launcher_plan(env, spark_home, archive)))
        return _planned[-1]
    if refusals(archive) >= REFUSALS:
        log.info("no class archive: the JVM did not write or map %s the last %d times (tried again "
                 "after a day, or by offsetlake warm-up)", archive, REFUSALS)
        return None
    lock = directory / f"spark-{key}.lock"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if _stale(lock):
            lock.unlink(missing_ok=True)
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:  # another process writes it, or the cache is not writable: run without
        return None
    os.close(fd)
    for old in directory.glob(f"spark-{key}.*.tmp"):
        if _stale(old):
            old.unlink(missing_ok=True)
    for unused in directory.glob("spark-*.jsa"):  # a mapped one was touched (``started``)
        if _stale(unused, UNUSED_DAYS * 86400):
            with suppress(OSError):  # another user's: theirs to remove
                unused.unlink(missing_ok=True)
    _planned.append(ArchivePlan(archive, writing=directory / f"spark-{key}.{os.getpid()}.tmp", lock=lock,
                                launcher=_launcher_plan(env, spark_home, archive)))
    return _planned[-1]


def _refusal_marker(archive: Path) -> Path:
    """Where the refusals of ``archive`` are counted."""
    return archive.with_suffix(".refused")


def refusals(archive: Path) -> int:
    """How many times in a row the JVM did not write or map ``archive`` (0 after a day)."""
    marker = _refusal_marker(archive)
    try:
        return 0 if _stale(marker, REFUSED_SECONDS) else int(marker.read_text() or 0)
    except (OSError, ValueError):
        return 0


def _refused(archive: Path) -> None:
    with suppress(OSError):
        _refusal_marker(archive).write_text(str(refusals(archive) + 1))


def forget_refusals(directory: Path) -> None:
    """Try every key again (``offsetlake warm-up``: asked to write an archive now)."""
    for marker in directory.glob("spark-*.refused"):
        with suppress(OSError):
            marker.unlink()


def _launcher_plan(env: Mapping[str, str], spark_home: Path, archive: Path) -> LauncherPlan | None:
    """The launcher's archive beside the JVM's (same key: same Java, same jars): mapped if
    published, else written by this run. None when the user set ``SPARK_LAUNCHER_OPTS``."""
    if "SPARK_LAUNCHER_OPTS" in env:
        return None
    java = _java(env)
    # what spark-class runs: "$RUNNER" -Xmx128m $SPARK_LAUNCHER_OPTS -cp "$SPARK_JARS_DIR/*"
    command = (str(java), "-Xmx128m", *QUIET_CDS_LOG.split(), "-cp", str(spark_home / "jars" / "*"),
               "org.apache.spark.launcher.Main")
    published = archive.with_suffix(".launcher.jsa")
    if published.is_file():
        return LauncherPlan(published, command)
    for old in archive.parent.glob(f"{archive.stem}.*.launcher.tmp"):  # left by a run that died
        if _stale(old):
            with suppress(OSError):
                old.unlink(missing_ok=True)
    writing = archive.with_suffix(f".{os.getpid()}.launcher.tmp")
    return LauncherPlan(published, command, writing=writing) if _room_for(writing) else None


def _room_for(path: Path) -> bool:
    """Whether ``path`` could be created, with ``LAUNCHER_ROOM`` to spare (it is, empty).

    Why: a JVM that cannot write its archive at exit exits 1, and spark-class, which checks
    the launcher's status, fails the launch with it (a cache directory that is read-only,
    another user's, or full). The launcher then runs as spark-class runs it."""
    try:
        if shutil.disk_usage(path.parent).free < LAUNCHER_ROOM:
            return False
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))  # per process: its name has our pid
    except OSError:
        return False
    return True


#: archives written, to publish at exit: (the order for :func:`publish`, the JVM to let exit)
_pending: list[tuple[dict, object | None]] = []


def abandon(archive_plan: ArchivePlan | None, suspect: bool = True) -> None:
    """The JVM did not start: release the lock for the next run, drop the files it was to
    write, and drop the archives it was to map (a damaged archive crashes the JVM; a sound
    one is written again by a later run). Not ``suspect`` (Ctrl-C during the launch): the
    archives to map stay, since that says nothing of them, and rewriting one costs the next
    run ~3 s and ~20 s of CPU."""
    if archive_plan is None:
        return
    if archive_plan.lock is not None:
        archive_plan.lock.unlink(missing_ok=True)
    launcher = archive_plan.launcher
    if launcher is not None and (launcher.writing is not None or suspect):
        (launcher.archive if launcher.writing is None else launcher.writing).unlink(missing_ok=True)
    if archive_plan.writing is None and suspect:
        archive_plan.archive.unlink(missing_ok=True)
        log.warning("the JVM did not start with the class archive %s; it is removed",
                    archive_plan.archive)


def started(archive_plan: ArchivePlan | None, gateway_process) -> None:
    """Check that a JVM given an archive to map did map it (:func:`_keep_if_mapped`).
    Remember a JVM that writes an archive at exit, with its command line (to check the
    archive against), for :func:`finish`; without a command line there is nothing to
    check it with, and the archive is given up."""
    if archive_plan is None or gateway_process is None:
        return
    launcher = archive_plan.launcher
    if launcher is not None and launcher.writing is not None:
        # spark-class waited for its launcher, so that archive is complete (or damaged)
        if _size(launcher.writing):
            _publish_at_exit({"pid": None, "command": list(launcher.command), "writing": str(launcher.writing),
                              "archive": str(launcher.archive), "lock": None}, None)
        else:  # made empty by the plan; the launcher wrote nothing (SPARK_LAUNCHER_OPTS not read)
            launcher.writing.unlink(missing_ok=True)
    if archive_plan.writing is None:
        mapped_launcher = (launcher.archive,) if launcher is not None and launcher.writing is None else ()
        _keep_if_mapped(archive_plan.archive, gateway_process.pid, mapped_launcher)
        return
    try:  # spark-submit execs the JVM: the gateway process is the JVM itself
        with open(f"/proc/{gateway_process.pid}/cmdline", "rb") as fh:
            command = [a.decode() for a in fh.read().split(b"\0") if a]
    except OSError:
        abandon(archive_plan)
        return
    _publish_at_exit({"pid": gateway_process.pid, "command": command, "writing": str(archive_plan.writing),
                      "archive": str(archive_plan.archive), "lock": str(archive_plan.lock)},
                     gateway_process)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _publish_at_exit(order: dict, process: object | None) -> None:
    if not _pending:
        atexit.register(finish)
    _pending.append((order, process))


def _keep_if_mapped(archive: Path, pid: int, companions: tuple[Path, ...] = ()) -> None:
    """If the JVM ``pid`` maps ``archive`` (its memory map names the file), the archive's
    modification time records the use; if not, the JVM refused it (written for
    another class path or Java) and ran without it, as every later JVM would, and it is
    removed so that the next run writes one this JVM maps. Without ``/proc`` (not Linux), or
    when ``pid`` is not the JVM given the archive (a launcher that did not exec it), there is
    nothing to judge by, and the archive stays. ``companions`` (the launcher's archive, which
    the same Java and jars made, in a process gone by now) share its fate."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            given = f"-XX:SharedArchiveFile={archive}".encode() in fh.read().split(b"\0")
        with open(f"/proc/{pid}/maps") as fh:
            maps = fh.read()
    except OSError:
        return
    if not given:
        return
    if os.path.realpath(archive) in maps:
        for path in (archive, *companions):
            with suppress(OSError):  # another user's cache: it stays as it is
                os.utime(path)
        return
    for path in (archive, *companions):
        with suppress(OSError):
            path.unlink(missing_ok=True)
    _refused(archive)
    log.info("the JVM did not map the class archive %s (made for another installation of Spark "
             "or another Java); removed, the next run writes one for this JVM", archive)


def finish(wait: bool = False) -> None:
    """Let each JVM that writes an archive exit (pyspark's gateway exits when its stdin
    closes) and leave its publication to a detached process (:func:`publish`), so no run
    waits for the dump: a JVM spends ~20 s of CPU writing the archive at exit. ``wait``:
    publish here instead, once the JVM has exited (``offsetlake warm-up``: the archive is
    in place when the command ends).

    Call after the SparkSession stopped; a no-op when no archive is being written.
    """
    while _pending:
        order, process = _pending.pop()
        try:
            order_file = Path(order["writing"]).with_suffix(".json")
            order_file.write_text(json.dumps(order))
            if not wait:
                subprocess.Popen([sys.executable, "-m", "pipelines.jvm_cache", str(order_file)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
            if process is not None and process.stdin is not None:
                process.stdin.close()
            if wait:
                publish(order_file)
        except Exception as exc:  # a cache: never the reason a run fails
            log.debug("JVM class archive not written: %s", exc)
            for leftover in (order["writing"], order["lock"]):
                if leftover:
                    with suppress(OSError):
                        Path(leftover).unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie has exited
    except (OSError, IndexError):
        return False


def check_command(command: list[str], archive: Path) -> list[str]:
    """The JVM's own options and class path (everything before its main class), checking
    ``archive`` against them (``-XX:+PrintSharedArchiveAndExit`` prints "archive is valid" for
    one it can map; a damaged one crashes it or is refused), running nothing."""
    options, i = [], 1
    while i < len(command) and command[i].startswith("-") \
            and command[i] not in ("-version", "--version", "-jar", "-m", "--module"):
        taking_value = command[i] in ("-cp", "-classpath", "--class-path", "--add-modules",
                                      "--module-path", "-p")
        options += command[i:i + 2] if taking_value else [command[i]]
        i += 2 if taking_value else 1
    options = [o for o in options if not o.startswith(("-XX:ArchiveClassesAtExit=",
                                                       "-XX:SharedArchiveFile=", "-Xshare:"))]
    return [command[0], *options, "-Xshare:on", f"-XX:SharedArchiveFile={archive}",
            "-XX:+PrintSharedArchiveAndExit", "-XX:ErrorFile=/dev/null",
            "-XX:-CreateCoredumpOnCrash", "-version"]


def _valid(command: list[str], writing: Path) -> bool:
    check = subprocess.run(check_command(command, writing), capture_output=True, cwd=writing.parent,
                           timeout=120)
    return check.returncode == 0 and b"archive is valid" in check.stdout


def publish(order_file: Path, timeout: float = 900.0) -> bool:
    """Wait for the JVM of ``order_file`` to exit (``pid`` None: it has), then publish the
    archive it wrote if a JVM with the same options maps it cleanly (a partial archive
    crashes the JVM that maps it). Returns whether it published; always releases the lock
    (if any) and the temporary files."""
    order = json.loads(order_file.read_text())
    writing, archive, pid = Path(order["writing"]), Path(order["archive"]), order["pid"]
    try:
        deadline = time.monotonic() + timeout
        while pid is not None and _running(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid is not None and _running(pid):
            return False
        if not writing.is_file() or not _valid(order["command"], writing):
            if order["lock"]:  # the JVM's archive (not its launcher's)
                _refused(archive)
            return False
        os.replace(writing, archive)
        _refusal_marker(archive).unlink(missing_ok=True)
        return True
    finally:
        writing.unlink(missing_ok=True)
        if order["lock"]:
            Path(order["lock"]).unlink(missing_ok=True)
        order_file.unlink(missing_ok=True)


if __name__ == "__main__":
    publish(Path(sys.argv[1]))
