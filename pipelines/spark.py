"""One place that builds SparkSessions the way this project needs them (see PLATFORM.md).

Settings the user gave Spark (``--conf``, ``--master``, ``--driver-memory`` given to
spark-submit or in ``PYSPARK_SUBMIT_ARGS``, ``spark-defaults.conf`` in ``SPARK_CONF_DIR``
or ``SPARK_HOME/conf``, ``SPARK_DRIVER_MEMORY``, an already running SparkContext) are
never overridden. Laptop-sized defaults (few shuffle partitions, no UI, a quiet log,
driver memory) apply only to a local master; on a cluster the cluster's settings rule.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import signal
import sys
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from pipelines import ctrl_c, jvm_cache, jvm_output, spark_fork_server, spark_python
from pipelines.spark_daemon import DAEMON_MODULE
from pipelines.without_pandas import WORKERS_WITHOUT_PANDAS

log = logging.getLogger(__name__)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
LOCAL_MASTER = "local[2]"

# What the job relies on, on any master, unless the user chose otherwise.
GENERAL_DEFAULTS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
}
# Laptop-sized settings: only for a local master, only where the user set nothing.
LOCAL_DEFAULTS = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    # micro-batches come to the driver as Arrow: give its JVM room for ~1M-record batches
    "spark.driver.memory": "4g",
    "spark.driver.maxResultSize": "0",
}
#: where Spark finds the Python of its workers and of its driver-side Python processes
PYTHON_VARIABLES = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
#: Spark's setting for the module its Python task daemon runs (``pyspark.daemon`` by default)
DAEMON_CONF = "spark.python.daemon.module"
LOCAL_LOG_LEVEL = "FATAL"  # failures reach the user as our own one-line errors
# JVM flags for a local master that this process launches: the C1 compiler only. A scheduled
# run is short and Python does the heavy work, so C2's compile threads mostly compete with
# Spark's start-up for the cores (measured in benchmarks/real_workload.py; PLATFORM.md: 10-40%
# faster start). Given through SPARK_SUBMIT_OPTS, before the user's own SPARK_SUBMIT_OPTS, and
# spark-submit puts them on the driver's command line before spark.driver.extraJavaOptions: a
# user's own JIT flags come later and win.
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
# log4j2 settings for a quiet JVM start, a file of the package (read-only, nothing written:
# a fixed name in a shared temporary directory was another user's to own or replace). None
# where the package is no directory of files (run from a zip): the JVM then announces itself
_QUIET_LOG4J_FILE = Path(__file__).with_name("log4j2-quiet.properties")
QUIET_LOG4J = _QUIET_LOG4J_FILE if _QUIET_LOG4J_FILE.is_file() else None


@dataclass(frozen=True)
class SessionSettings:
    """What :func:`spark_session` gives the builder: a master (None: keep the user's),
    settings, and a log level to set once the session runs (None: keep the user's)."""

    master: str | None
    conf: dict[str, str] = field(default_factory=dict)
    log_level: str | None = None
    #: SPARK_SUBMIT_OPTS for the local JVM this process launches (None: it launches none)
    submit_opts: str | None = None
    #: whether the master is a local one (executors on this host)
    local: bool = True


def is_local_master(master: str | None) -> bool:
    return bool(master) and master.strip().startswith("local")


def _read_properties(path: Path) -> dict[str, str]:
    """A Spark properties file (``key value`` or ``key=value`` lines, ``#`` comments)."""
    out = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        parts = re.split(r"\s*[=:\s]\s*", line, maxsplit=1)
        out[parts[0]] = parts[1].strip() if len(parts) > 1 else ""
    return out


def _spark_home(env: Mapping[str, str]) -> Path:
    if env.get("SPARK_HOME"):
        return Path(env["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


def submit_conf(env: Mapping[str, str]) -> dict[str, str]:
    """The settings the spark-submit that pyspark launches will see: ``PYSPARK_SUBMIT_ARGS``,
    its properties file or ``spark-defaults.conf``, and ``SPARK_DRIVER_MEMORY``."""
    conf: dict[str, str] = {}
    args = shlex.split(env.get("PYSPARK_SUBMIT_ARGS", ""))
    properties_file = None
    given: dict[str, str] = {}
    options = {"--master": "spark.master", "--driver-memory": "spark.driver.memory",
               "--name": "spark.app.name", "--deploy-mode": "spark.submit.deployMode",
               "--py-files": "spark.submit.pyFiles"}
    i = 0
    while i < len(args):
        arg, value = args[i], args[i + 1] if i + 1 < len(args) else ""
        name, eq, inline = arg.partition("=")
        if eq and name in (*options, "--conf", "--properties-file"):
            arg, value, step = name, inline, 1
        else:
            step = 2
        if arg in ("--conf", "-c") and "=" in value:
            key, val = value.split("=", 1)
            given[key] = val
        elif arg in options:
            given[options[arg]] = value
        elif arg == "--properties-file":
            properties_file = Path(value)
        else:
            step = 1
        i += step
    conf_dir = Path(env["SPARK_CONF_DIR"]) if env.get("SPARK_CONF_DIR") \
        else _spark_home(env) / "conf"
    defaults = properties_file or conf_dir / "spark-defaults.conf"
    if defaults.is_file():
        conf.update(_read_properties(defaults))
    if env.get("SPARK_DRIVER_MEMORY"):
        conf["spark.driver.memory"] = env["SPARK_DRIVER_MEMORY"]
    conf.update(given)  # the command line wins over files, as in spark-submit
    return conf


def _user_log_config(env: Mapping[str, str]) -> bool:
    """Whether the user configured Spark's logging with a log4j2 file of their own."""
    conf_dir = Path(env["SPARK_CONF_DIR"]) if env.get("SPARK_CONF_DIR") \
        else _spark_home(env) / "conf"
    return (conf_dir / "log4j2.properties").is_file() or (conf_dir / "log4j2.xml").is_file()


def session_settings(user_conf: Mapping[str, str], *, master: str | None = None,
                     jvm_running: bool = False, delta_spark: bool = False,
                     extra_conf: Mapping[str, str] | None = None,
                     env: Mapping[str, str] | None = None) -> SessionSettings:
    """Decide the builder's settings from the user's (pure: no JVM, no environment writes).

    ``user_conf``: what the user gave Spark (never overridden). ``master``: the caller's
    explicit choice. ``jvm_running``: the JVM already exists (spark-submit started this
    process, or a context runs), so launch-time settings such as driver memory are moot.
    ``extra_conf``: settings the calling code requires (applied as given).
    """
    env = os.environ if env is None else env
    chosen = master
    if chosen is None and not jvm_running:  # under spark-submit its --master stands
        chosen = env.get("OFFSETLAKE_SPARK_MASTER") or None
        if chosen is None and "spark.master" not in user_conf:
            chosen = LOCAL_MASTER
    effective = chosen or user_conf.get("spark.master") or LOCAL_MASTER
    local = is_local_master(effective)

    defaults = dict(GENERAL_DEFAULTS)
    if local:
        defaults.update(LOCAL_DEFAULTS)
    quiet = env.get("OFFSETLAKE_SPARK_QUIET", "true") != "false"  # `offsetlake --verbose`: not
    if quiet:
        defaults["spark.ui.showConsoleProgress"] = "false"
        if QUIET_LOG4J and not jvm_running and not env.get("OFFSETLAKE_SPARK_LOG_LEVEL") \
                and not _user_log_config(env):  # no JVM start-up banner or native-hadoop warning
            # the driver's default options, not its extra ones: those are the user's to set
            # (a proxy, a truststore), and a log4j2 file of theirs there comes later and wins
            defaults["spark.driver.defaultJavaOptions"] = \
                f"-Dlog4j2.configurationFile={shlex.quote(str(QUIET_LOG4J))}"
    if env.get("OFFSETLAKE_SPARK_DRIVER_MEMORY"):  # the user's, through our own variable
        defaults["spark.driver.memory"] = env["OFFSETLAKE_SPARK_DRIVER_MEMORY"]
    if jvm_running:
        defaults.pop("spark.driver.memory", None)
    conf = {k: v for k, v in defaults.items() if k not in user_conf}
    if delta_spark:
        extensions = [e.strip() for e in user_conf.get("spark.sql.extensions", "").split(",")
                      if e.strip()]
        if DELTA_EXTENSION not in extensions:
            conf["spark.sql.extensions"] = ",".join([*extensions, DELTA_EXTENSION])
        if "spark.sql.catalog.spark_catalog" not in user_conf:
            conf["spark.sql.catalog.spark_catalog"] = DELTA_CATALOG
    conf.update(extra_conf or {})

    log_level = env.get("OFFSETLAKE_SPARK_LOG_LEVEL")
    if log_level is None and local and "spark.log.level" not in user_conf \
            and not _user_log_config(env):
        log_level = LOCAL_LOG_LEVEL
    submit_opts = None
    if local and not jvm_running:  # the user's own options come after ours: theirs win
        submit_opts = " ".join(o for o in (LOCAL_JVM_OPTIONS, env.get("SPARK_SUBMIT_OPTS", "").strip()) if o)
    return SessionSettings(master=chosen if chosen != user_conf.get("spark.master") else None,
                           conf=conf, log_level=log_level, submit_opts=submit_opts, local=local)


def user_spark_conf(env: Mapping[str, str] | None = None) -> tuple[dict[str, str], bool]:
    """``(settings the user gave Spark, whether the JVM already runs)``.

    A running context or a JVM that spark-submit started (``PYSPARK_GATEWAY_PORT``) already
    holds every ``--conf`` and ``spark-defaults.conf`` setting; otherwise they are read the
    way the spark-submit that pyspark is about to launch will read them.
    """
    env = os.environ if env is None else env
    from pyspark import SparkConf, SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        return dict(active.getConf().getAll()), True
    if "PYSPARK_GATEWAY_PORT" in env:  # spark-submit's JVM: its --conf are system properties
        # connected first: without the JVM, SparkConf() is empty, and every --conf counted unset
        SparkContext._ensure_initialized()
        return dict(SparkConf().getAll()), True
    return submit_conf(env), False


def spark_session(app_name: str = "offsetlake", master: str | None = None, delta_spark: bool = False,
                  extra_conf: dict[str, str] | None = None, own_workers: bool = False):
    """A SparkSession with the user's settings untouched.

    ``own_workers``: the session's Python workers will only ever run offsetlake's code (the
    CLI's process, which ends with its command): a local JVM launched here then runs them
    without pandas (:func:`pipelines.without_pandas.block_pandas_in_own_workers`) and, when
    they run this interpreter, forks them from a daemon that imported the tasks' modules
    (:mod:`pipelines.spark_daemon`).

    The master: ``master`` if given; under spark-submit, its ``--master``; else
    ``OFFSETLAKE_SPARK_MASTER``, else ``PYSPARK_SUBMIT_ARGS``' or spark-defaults'
    ``spark.master``, else local[2].

    A session that already runs in this process (a notebook's, a test's, the caller's) is
    the user's and is returned as it is: the builder would otherwise write our settings into
    it, and a Delta catalog set on a session without Delta's jars breaks every later query
    of that session. Whether it can serve the Delta engine is checked where that is needed.

    A Ctrl-C while the session starts ends the JVM being launched and is raised once the
    start is cut short, never inside an import or a fork (:mod:`pipelines.ctrl_c`).
    """
    began = _ticks_since_boot()
    with ctrl_c.ctrl_c_deferred(lambda: _end_launch_unless_up(began)) as deferral:
        return _spark_session(app_name, master, delta_spark, extra_conf, own_workers, deferral)


def _spark_session(app_name: str, master: str | None, delta_spark: bool, extra_conf: dict[str, str] | None,
                   own_workers: bool, deferral: ctrl_c.Deferral):
    python_chosen = tuple(os.environ.get(variable) for variable in PYTHON_VARIABLES)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)  # its processes run on this host
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    running = SparkSession.getActiveSession()
    if running is not None:
        log.debug("Spark session: reusing the running one (%s) untouched", running.sparkContext.master)
        include_wheels(running.sparkContext)
        return running
    user_conf, jvm_running = user_spark_conf()
    settings = session_settings(user_conf, master=master, jvm_running=jvm_running,
                                delta_spark=delta_spark, extra_conf=extra_conf)
    if settings.local:  # a cluster's executors run its own Python: "python3" unless the user says
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    options = {**({} if "spark.app.name" in user_conf else {"spark.app.name": app_name}),  # --name stands
               **({"spark.master": settings.master} if settings.master else {}), **settings.conf}
    ours = bool(settings.submit_opts)  # a local JVM this process launches
    refusal, handover = _archive_launch(settings, user_conf, os.environ)
    archive_env = {**os.environ, **handover}
    archive = None if refusal else jvm_cache.plan(
        archive_env, _spark_home(archive_env),
        jvm_cache.key_options(LOCAL_JVM_OPTIONS, *_users_jvm_options(user_conf, os.environ).values()),
        user_conf.get("spark.driver.extraClassPath", ""))
    launcher = spark_python.launcher() if ours else None
    if launcher:  # workers use PYSPARK_PYTHON, the driver-side ones PYSPARK_DRIVER_PYTHON
        # (not spark.pyspark.python or .driver.python: a session started from Python reads neither)
        for variable, chosen in zip(PYTHON_VARIABLES, python_chosen, strict=True):
            if _same_python(chosen):
                os.environ[variable] = launcher
        os.environ.update(spark_python.launcher_env(_spark_home(os.environ)))  # what it runs
    launch_env: dict[str, str] = {}  # only for the spark-submit that launches the JVM
    if ours:
        handed = handover if archive else {}  # only for the archive's sake
        launch_env.update(handed)
        # the user's options last: a -Xlog of theirs comes after the archive's -Xlog:disable
        launch_env["SPARK_SUBMIT_OPTS"] = " ".join(o for o in (
            archive.java_options if archive else "", handed.get("SPARK_SUBMIT_OPTS", ""), settings.submit_opts) if o)
        if archive and archive.launcher:
            launch_env["SPARK_LAUNCHER_OPTS"] = archive.launcher.options
        if own_workers:
            launch_env[WORKERS_WITHOUT_PANDAS] = "1"
            if launcher and os.environ.get("PYSPARK_PYTHON") == launcher and DAEMON_CONF not in user_conf:
                options[DAEMON_CONF] = DAEMON_MODULE
                launch_env.update(spark_fork_server.start({**os.environ, **launch_env}))
    probe = _worker_python_probe(user_conf, python_chosen[0]) if ours else None
    before = {variable: os.environ.get(variable) for variable in launch_env}
    os.environ.update(launch_env)
    launch_began = _ticks_since_boot()
    try:
        with jvm_output.forwarded():
            spark = _get_or_create(options, deferral)
    except BaseException as exc:
        if probe:
            probe.stop()
        _end_failed_launch(launch_began)
        jvm_cache.abandon(archive, suspect=isinstance(exc, Exception) and not ctrl_c.pressed())  # not for Ctrl-C
        raise
    finally:
        for variable, value in before.items():  # nothing else this process starts sees ours
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
    jvm_cache.started(archive, getattr(spark.sparkContext._gateway, "proc", None))
    if probe:
        try:
            probe.check()
        except spark_python.WorkerPythonError:
            spark.stop()
            raise
    if settings.log_level:
        spark.sparkContext.setLogLevel(settings.log_level)
    include_wheels(spark.sparkContext)
    log.debug("Spark session: master %s, %d settings of ours, user's kept: %s",
              spark.sparkContext.master, len(settings.conf), sorted(user_conf))
    return spark


def _archive_launch(settings: SessionSettings, user_conf: Mapping[str, str],
                    env: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """``(why the JVM of a session with settings gets no class archive (None: it gets one),
    the launch variables it takes for one)``: only a JVM this process launches, with none of
    the user's JVM options that keep an archive from being mapped
    (:func:`pipelines.jvm_cache.options_refusal`), and a conf dir of defaults handed over
    (:func:`pipelines.jvm_cache.conf_dir_handover`)."""
    if not settings.submit_opts:
        return "offsetlake does not launch this JVM (a master that is not local, or a JVM already running)", {}
    options = _users_jvm_options(user_conf, env)
    refusal = jvm_cache.options_refusal(options)
    if refusal:
        return refusal, {}
    handover = jvm_cache.conf_dir_handover(env, _spark_home(env), " ".join(options.values()))
    launched = {**env, **handover}  # what the JVM will see
    return jvm_cache.why_not(launched, _spark_home(launched),
                             user_conf.get("spark.driver.extraClassPath", "")), handover


#: the user's settings that give the local driver JVM options
DRIVER_JAVA_OPTIONS = ("spark.driver.defaultJavaOptions", "spark.driver.extraJavaOptions")


def _users_jvm_options(user_conf: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """Where the user gave the local JVM options -> those options."""
    return {**{k: env[k] for k in ("SPARK_SUBMIT_OPTS", *jvm_cache.OPTION_ENV) if env.get(k)},
            **{k: user_conf[k] for k in DRIVER_JAVA_OPTIONS if user_conf.get(k)}}


def class_archive_refusal() -> str | None:
    """Why a session :func:`spark_session` makes now would get no class archive (None: it
    would map or write one), read from the same settings."""
    user_conf, jvm_running = user_spark_conf()
    return _archive_launch(session_settings(user_conf, jvm_running=jvm_running), user_conf, os.environ)[0]


def _get_or_create(options: dict[str, str], deferral: ctrl_c.Deferral):
    """The session, made as pyspark's builder makes it, in two steps: its context, then the
    session. Why: the context sets pyspark's SIGINT handler (it cancels every job through
    py4j), and making the session then takes the JVM ~0.5 s more; a Ctrl-C in that call
    reached pyspark's handler inside the main thread's own read of py4j's socket: "reentrant
    call", an ERROR with a traceback, the JVM lost, exit 1 instead of 130 (Ctrl-C 2.9-3.3 s
    into every ingest here). Between the steps the Ctrl-C is taken back (:mod:`pipelines.ctrl_c`)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.config(map=options)
    if not any(k in os.environ for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")):  # Connect: the builder's
        SparkContext.getOrCreate(SparkConf().setAll(list(options.items())))
        deferral.rearm()
    return builder.getOrCreate()


#: what a JVM pyspark launches runs as: its scripts, then the JVM they exec
_LAUNCH_MARKS = (b"bin/spark-submit", b"bin/spark-class", b"org.apache.spark.deploy.SparkSubmit")


def _ticks_since_boot() -> int | None:
    """Now, in the clock ticks of ``/proc/<pid>/stat``'s start times (None: no ``/proc``)."""
    try:
        with open("/proc/uptime") as fh:
            return int(float(fh.read().split()[0]) * os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None


def _end_launch_unless_up(began: int | None) -> None:
    """After a Ctrl-C during :func:`spark_session`: end the JVM being launched, so that
    pyspark's wait for its port ends at once; one whose gateway answers finishes its start
    (a second or less), the Ctrl-C raised after it, as no call to it is cut."""
    context = getattr(sys.modules.get("pyspark.core.context"), "SparkContext", None)  # may be mid-import
    if context is None or context._gateway is None:
        _end_failed_launch(began, reap=False)  # pyspark's wait reaps it: that is how it sees the end


def _end_failed_launch(began: int | None, reap: bool = True) -> None:
    """Kill what remains of a JVM launch that failed or was interrupted (Ctrl-C while
    pyspark waits for its port: pyspark then removes the directory the JVM is to write its
    port to, the JVM's main thread dies of it, and py4j's server thread, no daemon, kept it
    alive for good: one orphaned JVM of ~450 MB per interrupted start). On Linux, by this
    process' children (``/proc``) started since the launch ``began`` (a caller's own
    spark-submit is left alone), waited for if ``reap``; elsewhere nothing is done."""
    if began is None:
        return
    me = os.getpid()
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return
    for pid in map(int, entries):
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            if int(fields[1]) != me or int(fields[19]) < began - 1:  # parent, start time
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                command = fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if any(mark in command for mark in _LAUNCH_MARKS):
            log.debug("ending the JVM launch that did not complete (pid %d)", pid)
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                if reap:
                    os.waitpid(pid, 0)


def _worker_python_probe(user_conf: Mapping[str, str], chosen: str | None
                         ) -> spark_python.WorkerPythonProbe | None:
    """A probe of the ``PYSPARK_PYTHON`` the user chose for the Python processes of a local
    master, unless it is this interpreter (:func:`_same_python`) or ``--py-files`` come from
    elsewhere. (pyspark gives the JVM that variable, not ``spark.pyspark.python``, for them.)"""
    py_files = [p.strip() for p in user_conf.get("spark.submit.pyFiles", "").split(",") if p.strip()]
    if _same_python(chosen) or any(re.match(r"[a-zA-Z][\w+.-]+://", p) and not p.startswith("file:")
                                   for p in py_files):  # what Spark fetches: not seen here
        return None
    return spark_python.WorkerPythonProbe(str(chosen), _spark_home(os.environ), os.environ, py_files)


def _same_python(chosen: str | None) -> bool:
    """Whether ``PYSPARK_PYTHON`` leaves the workers' Python to us: unset, or this very
    interpreter in this very environment (which ``offsetlake-spark-python`` runs as it is, see
    pipelines/spark_python.py): its path, or another name for it beside it, as Spark finds it
    (``python3`` on the PATH of an activated virtualenv: the common ``PYSPARK_PYTHON=python3``
    otherwise cost the real workload ~3.7 s of every start, 6.6 against 10.4 s)."""
    if not chosen:
        return True
    found = chosen if os.sep in chosen else shutil.which(chosen)  # the JVM execs it from PATH
    if found is None:
        return False
    path, ours = os.path.abspath(found), os.path.abspath(sys.executable)
    if path in (ours, os.path.abspath(spark_python.launcher() or ours)):
        return True
    # a file, and a directory: a venv's python is a link to the base interpreter, another
    # environment; its python3 beside it is the same one
    with suppress(OSError):
        return os.path.dirname(path) == os.path.dirname(ours) and os.path.samefile(path, ours)
    return False


def include_wheels(sc) -> list[str]:
    """Put wheels given to ``--py-files`` on the Python workers' path; returns their names.

    spark-submit ships every ``--py-files`` file to the driver and executors, but pyspark
    adds only ``.zip``/``.egg``/``.jar`` ones to the path of the Python workers
    (``SparkContext.PACKAGE_EXTENSIONS``), so with ``--py-files offsetlake-*.whl`` the
    executors (and the driver-side worker that creates a Python data source) cannot import
    ``pipelines``. A pure-Python wheel is a zip that imports as it is: it joins the same list.
    The driver-side worker of a Python *streaming* source looks for includes in a fixed
    ``streaming_job`` subdirectory where spark-submit's files never are (Spark's
    PythonStreamingSourceRunner), so the driver's copy also goes on the PYTHONPATH that
    Python functions carry (``sc.environment``; absent paths are ignored on executors).
    """
    includes = getattr(sc, "_python_includes", None)
    if includes is None:
        return []
    from pyspark import SparkFiles

    wheels = [os.path.basename(p.strip())
              for p in (sc.getConf().get("spark.submit.pyFiles") or "").split(",")
              if p.strip().lower().endswith(".whl")]
    added = [name for name in wheels if name not in includes]
    includes.extend(added)
    local = [os.path.join(SparkFiles.getRootDirectory(), name) for name in added]
    local = [p for p in local if os.path.exists(p)]
    if local:
        existing = sc.environment.get("PYTHONPATH")
        sc.environment["PYTHONPATH"] = os.pathsep.join([*local, *([existing] if existing else [])])
    if added:
        log.debug("wheels from --py-files on the Python workers' path: %s", added)
    return added


def jvm_class_visible(spark, class_name: str) -> bool:
    """Whether ``class_name`` loads through Spark's own class loader.

    Jars given with ``--jars``, ``--packages`` or ``spark.jars`` live in Spark's
    (context) class loader, not on the application class path that ``Class.forName``
    searches from py4j's side; ``Utils.classForName`` asks the context-or-Spark class loader,
    the same one Spark uses to find data sources and session extensions.
    """
    jvm = spark._jvm
    attempts = (
        lambda: jvm.org.apache.spark.util.Utils.classForName(class_name, False, False),
        lambda: jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(class_name),
        lambda: jvm.java.lang.Class.forName(class_name),
    )
    for attempt in attempts:
        try:
            attempt()
            return True
        except Exception:  # py4j's Py4JJavaError/Py4JError: not visible to this loader
            continue
    return False


def has_delta_jars(spark) -> bool:
    """Whether delta-spark's JVM classes are visible to Spark (they are not installable here)."""
    return jvm_class_visible(spark, "io.delta.tables.DeltaTable")


def has_kafka_connector(spark) -> bool:
    """Whether Spark's kafka source (spark-sql-kafka-0-10) is visible to Spark."""
    return jvm_class_visible(spark, "org.apache.spark.sql.kafka010.KafkaSourceProvider")
