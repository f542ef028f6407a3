"""Session settings: laptop defaults only on a local master, never over a user's setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from pipelines.spark import (
    DELTA_CATALOG,
    DELTA_EXTENSION,
    GENERAL_DEFAULTS,
    LOCAL_DEFAULTS,
    LOCAL_JVM_OPTIONS,
    session_settings,
    spark_session,
    submit_conf,
)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose Spark conf dir is empty (no spark-defaults.conf, no log4j2);
    the quiet-console settings are off here and tested on their own below."""
    conf_dir = tmp_path / "spark-conf"
    conf_dir.mkdir()
    return {"SPARK_CONF_DIR": str(conf_dir), "OFFSETLAKE_SPARK_QUIET": "false"}


def test_quiet_console_settings_yield_to_the_users(env: dict[str, str]) -> None:
    env["OFFSETLAKE_SPARK_QUIET"] = "true"
    quiet = session_settings({}, env=env)
    assert quiet.conf["spark.ui.showConsoleProgress"] == "false"
    assert "log4j2.configurationFile" in quiet.conf["spark.driver.defaultJavaOptions"]
    user = {"spark.ui.showConsoleProgress": "true", "spark.driver.extraJavaOptions": "-Dx=1",
            "spark.driver.defaultJavaOptions": "-Dy=1"}
    kept = session_settings(user, env=env)
    assert "spark.ui.showConsoleProgress" not in kept.conf
    assert "spark.driver.extraJavaOptions" not in kept.conf
    assert "spark.driver.defaultJavaOptions" not in kept.conf


def test_local_master_gets_every_default(env: dict[str, str]) -> None:
    s = session_settings(submit_conf(env), env=env)
    assert s.master == "local[2]"
    assert s.conf == {**GENERAL_DEFAULTS, **LOCAL_DEFAULTS}
    assert s.log_level == "FATAL"


def test_spark_defaults_conf_and_submit_args_are_kept(env: dict[str, str]) -> None:
    Path(env["SPARK_CONF_DIR"], "spark-defaults.conf").write_text(
        "# a user's cluster-wide settings\n"
        "spark.sql.shuffle.partitions   64\n"
        "spark.driver.maxResultSize=2g\n"
        "spark.sql.session.timeZone Europe/Paris\n")
    env["PYSPARK_SUBMIT_ARGS"] = ("--conf spark.ui.enabled=true --driver-memory 1g "
                                  "--conf=spark.sql.shuffle.partitions=8 pyspark-shell")
    user = submit_conf(env)
    assert user["spark.sql.shuffle.partitions"] == "8"  # the command line wins over the file
    assert user["spark.driver.memory"] == "1g"
    s = session_settings(user, env=env)
    for key in ("spark.sql.shuffle.partitions", "spark.driver.maxResultSize", "spark.ui.enabled",
                "spark.driver.memory", "spark.sql.session.timeZone"):
        assert key not in s.conf, key
    assert s.conf == {"spark.sql.execution.arrow.pyspark.enabled": "true",
                      "spark.python.worker.reuse": "true"}
    assert s.master == "local[2]" and s.log_level == "FATAL"


def test_cluster_master_gets_no_laptop_defaults(env: dict[str, str]) -> None:
    env["PYSPARK_SUBMIT_ARGS"] = "--master spark://10.0.0.5:7077 pyspark-shell"
    s = session_settings(submit_conf(env), env=env)
    assert s.master is None  # the user's master stands
    assert not set(LOCAL_DEFAULTS) & set(s.conf)
    assert s.conf == GENERAL_DEFAULTS
    assert s.log_level is None


def test_under_spark_submit_its_master_stands(env: dict[str, str]) -> None:
    """spark-submit started the JVM: no master of ours, driver memory is moot."""
    env["OFFSETLAKE_SPARK_MASTER"] = "local[4]"
    s = session_settings({"spark.master": "spark://127.0.0.1:7077"}, jvm_running=True, env=env)
    assert s.master is None and not s.local
    assert s.conf == GENERAL_DEFAULTS and s.log_level is None
    local = session_settings({"spark.master": "local[3]", "spark.ui.enabled": "true"},
                             jvm_running=True, env=env)
    assert local.master is None and local.local
    assert "spark.driver.memory" not in local.conf and "spark.ui.enabled" not in local.conf
    assert local.conf["spark.sql.shuffle.partitions"] == "4"


def test_explicit_master_and_offsetlake_env(env: dict[str, str]) -> None:
    env["OFFSETLAKE_SPARK_MASTER"] = "spark://127.0.0.1:7077"
    s = session_settings({}, env=env)
    assert s.master == "spark://127.0.0.1:7077" and "spark.ui.enabled" not in s.conf
    assert session_settings({}, master="local[1]", env=env).master == "local[1]"
    env["OFFSETLAKE_SPARK_DRIVER_MEMORY"] = "6g"
    env["OFFSETLAKE_SPARK_LOG_LEVEL"] = "WARN"
    s = session_settings({}, env=env)
    assert s.conf["spark.driver.memory"] == "6g" and s.log_level == "WARN"
    assert "spark.driver.memory" not in session_settings({"spark.driver.memory": "2g"}, env=env).conf


def test_short_job_jvm_options_only_for_a_local_jvm_we_launch(env: dict[str, str]) -> None:
    assert session_settings({}, env=env).submit_opts == LOCAL_JVM_OPTIONS
    assert session_settings({"spark.master": "local[3]"}, jvm_running=True, env=env).submit_opts is None
    assert session_settings({"spark.master": "spark://10.0.0.5:7077"}, env=env).submit_opts is None
    env["SPARK_SUBMIT_OPTS"] = " -Dmine=1 -XX:TieredStopAtLevel=4 "  # the user's own come later: they win
    assert session_settings({}, env=env).submit_opts == f"{LOCAL_JVM_OPTIONS} -Dmine=1 -XX:TieredStopAtLevel=4"
    assert session_settings({"spark.master": "spark://10.0.0.5:7077"}, env=env).submit_opts is None


def test_user_log4j_config_keeps_its_level(env: dict[str, str]) -> None:
    Path(env["SPARK_CONF_DIR"], "log4j2.properties").write_text("rootLogger.level = info\n")
    assert session_settings({}, env=env).log_level is None
    assert session_settings({"spark.log.level": "INFO"}, env={}).log_level is None


def test_delta_extension_joins_the_users_extensions(env: dict[str, str]) -> None:
    s = session_settings({"spark.sql.extensions": "com.example.Ext"}, delta_spark=True, env=env)
    assert s.conf["spark.sql.extensions"] == f"com.example.Ext,{DELTA_EXTENSION}"
    assert s.conf["spark.sql.catalog.spark_catalog"] == DELTA_CATALOG
    kept = session_settings({"spark.sql.extensions": DELTA_EXTENSION,
                             "spark.sql.catalog.spark_catalog": "com.example.Catalog"},
                            delta_spark=True, env=env)
    assert "spark.sql.extensions" not in kept.conf
    assert "spark.sql.catalog.spark_catalog" not in kept.conf


@pytest.mark.spark
def test_a_running_session_is_returned_untouched(spark) -> None:
    """A Delta engine asked for in-process (the CLI called from a notebook or a test) must not
    write Delta's catalog into the running session: without Delta's jars that breaks every
    later query of the session (CI found exactly that)."""
    catalog = "spark.sql.catalog.spark_catalog"
    before = spark.conf.get(catalog, None), spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")  # a setting of the user's
    try:
        assert spark_session("in-process", delta_spark=True) is spark
        assert spark.conf.get(catalog, None) == before[0]
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
        assert spark.sql("WITH t AS (SELECT 1 AS x) SELECT x FROM t").collect()[0].x == 1
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before[1])


_PROBE = """
import json
from pipelines.spark import spark_session
spark = spark_session("probe")
keys = ["spark.sql.shuffle.partitions", "spark.ui.enabled", "spark.driver.maxResultSize",
        "spark.driver.memory", "spark.sql.session.timeZone"]
print(json.dumps({k: spark.sparkContext.getConf().get(k) for k in keys}))
spark.stop()
"""


@pytest.mark.slow
def test_real_session_keeps_users_settings(env: dict[str, str], tmp_path: Path) -> None:
    """A real JVM launched by pyspark: --conf and spark-defaults.conf values survive."""
    Path(env["SPARK_CONF_DIR"], "spark-defaults.conf").write_text("spark.driver.maxResultSize 1g\n")
    run_env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYSPARK_", "SPARK_", "OFFSETLAKE_SPARK"))}
    run_env.update(env)
    run_env["PYSPARK_SUBMIT_ARGS"] = ("--conf spark.sql.shuffle.partitions=7 "
                                      "--conf spark.ui.enabled=true pyspark-shell")
    out = subprocess.run([sys.executable, "-c", _PROBE], cwd=tmp_path, env=run_env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"spark.sql.shuffle.partitions": "7", "spark.ui.enabled": "true",
                   "spark.driver.maxResultSize": "1g", "spark.driver.memory": "4g",
                   "spark.sql.session.timeZone": "UTC"}


@pytest.mark.slow
def test_under_spark_submit_its_settings_stand(env: dict[str, str], tmp_path: Path) -> None:
    """spark-submit started the JVM: its --conf, --name and spark-defaults.conf values survive,
    and the laptop defaults fill only what it left unset. Before, the settings were read
    before this process reached the JVM, found empty, and ours were set over the user's."""
    Path(env["SPARK_CONF_DIR"], "spark-defaults.conf").write_text("spark.driver.maxResultSize 1g\n")
    run_env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYSPARK_", "SPARK_", "OFFSETLAKE_SPARK"))}
    run_env.update(env, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    job = tmp_path / "probe_job.py"
    job.write_text(_PROBE + "\nprint(json.dumps({'name': spark.sparkContext.appName}))\n")
    from pyspark.find_spark_home import _find_spark_home

    submit = Path(_find_spark_home()) / "bin" / "spark-submit"
    out = subprocess.run([str(submit), "--master", "local[1]", "--name", "users-name",
                          "--conf", "spark.sql.shuffle.partitions=7",
                          "--conf", "spark.sql.session.timeZone=Europe/Paris",
                          "--conf", f"spark.pyspark.driver.python={sys.executable}", str(job)],
                         cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    got, name = (json.loads(line) for line in out.stdout.strip().splitlines()[-2:])
    assert got == {"spark.sql.shuffle.partitions": "7", "spark.ui.enabled": "false",  # the laptop default
                   "spark.driver.maxResultSize": "1g", "spark.driver.memory": None,
                   "spark.sql.session.timeZone": "Europe/Paris"}
    assert name == {"name": "users-name"}


_JVM_ARGS_PROBE = """
import json, os
from pipelines.spark import spark_session
spark = spark_session("probe", own_workers=True)
bean = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print(json.dumps({"args": list(bean.getInputArguments()),
                  "env_left": os.environ.get("SPARK_SUBMIT_OPTS"),
                  "daemon": spark.sparkContext.getConf().get("spark.python.daemon.module"),
                  "one": spark.range(1).rdd.map(lambda r: r.id + 1).collect()}))
spark.stop()
"""


@pytest.mark.slow
def test_real_local_jvm_gets_the_short_job_options_and_the_users_win(
        env: dict[str, str], tmp_path: Path) -> None:
    """The C1-only flag reaches the driver JVM we launch, our variable does not outlive the
    launch, and a user's own JIT flag (spark.driver.extraJavaOptions) comes later, so it wins."""
    run_env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYSPARK_", "SPARK_", "OFFSETLAKE_SPARK"))}
    run_env.update(env)
    run_env["PYSPARK_SUBMIT_ARGS"] = ("--conf spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=4 "
                                      "pyspark-shell")
    run_env["OFFSETLAKE_JVM_CACHE"] = "off"  # else this JVM writes an archive for its options at exit
    out = subprocess.run([sys.executable, "-c", _JVM_ARGS_PROBE], cwd=tmp_path, env=run_env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    jit = [a for a in got["args"] if a.startswith("-XX:TieredStopAtLevel")]
    assert jit == [LOCAL_JVM_OPTIONS, "-XX:TieredStopAtLevel=4"]  # the last one is in force
    assert got["env_left"] is None
    assert got["daemon"] == "pipelines.spark_daemon" and got["one"] == [1]


@pytest.mark.slow
def test_a_users_own_jvm_options_and_python3_keep_the_fast_workers(
        env: dict[str, str], tmp_path: Path) -> None:
    """A user's SPARK_SUBMIT_OPTS (a proxy, a truststore) reach the local JVM after the
    C1-only flag, so a JIT flag of theirs wins; their variable is left as it was; and the
    Python workers are still forked by offsetlake's daemon, also with the common
    ``PYSPARK_PYTHON=python3`` of an activated virtualenv. Before, either turned the fast path
    off: the group-heavy ingest took 26.8-33.9 s with SPARK_SUBMIT_OPTS against 16.2-17.2 s, the
    real workload 10.4 s with python3 against 6.6 s. (The class archive beside them:
    tests/test_warm_up.py; off here, or this JVM would write one for these options at exit.)"""
    run_env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYSPARK_", "SPARK_", "OFFSETLAKE_SPARK"))}
    run_env.update(env)
    run_env["SPARK_SUBMIT_OPTS"] = "-Dmine=1 -XX:TieredStopAtLevel=4"
    run_env["OFFSETLAKE_JVM_CACHE"] = "off"
    run_env["PYSPARK_PYTHON"] = "python3"  # found on PATH, beside this interpreter
    run_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), run_env.get("PATH", "")])
    out = subprocess.run([sys.executable, "-c", _JVM_ARGS_PROBE], cwd=tmp_path, env=run_env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    jit = [a for a in got["args"] if a.startswith("-XX:TieredStopAtLevel")]
    assert jit == [LOCAL_JVM_OPTIONS, "-XX:TieredStopAtLevel=4"]  # theirs last: in force
    assert "-Dmine=1" in got["args"]
    assert got["env_left"] == "-Dmine=1 -XX:TieredStopAtLevel=4"
    assert got["daemon"] == "pipelines.spark_daemon" and got["one"] == [1]


_WORKER_PYTHON_PROBE = """
import json
from pipelines.spark import spark_session
spark = spark_session("probe", own_workers=True)
def where(batches):
    import sys
    import pyarrow as pa
    for _ in batches:
        yield pa.RecordBatch.from_pylist([{"python": sys.executable}])
print(json.dumps({"daemon": spark.sparkContext.getConf().get("spark.python.daemon.module"),
                  "workers": sorted({r.python for r in spark.range(2).mapInArrow(where, "python string").collect()})}))
spark.stop()
"""


@pytest.mark.slow
def test_spark_pyspark_python_settings_keep_the_fast_workers(env: dict[str, str], tmp_path: Path) -> None:
    """``spark.pyspark.python`` and ``.driver.python`` name another interpreter: a session
    started from Python reads neither (pyspark takes PYSPARK_PYTHON), so its workers run this
    interpreter either way; they no longer keep offsetlake's daemon and launcher off (the real
    workload 9.8-11.5 s against 6.6-7.9 s)."""
    other = tmp_path / "other"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(other)  # no pyarrow, no offsetlake
    run_env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYSPARK_", "SPARK_", "OFFSETLAKE_SPARK"))}
    run_env.update(env)
    run_env["PYSPARK_SUBMIT_ARGS"] = (f"--conf spark.pyspark.python={other}/bin/python "
                                      f"--conf spark.pyspark.driver.python={other}/bin/python pyspark-shell")
    out = subprocess.run([sys.executable, "-c", _WORKER_PYTHON_PROBE], cwd=tmp_path, env=run_env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["daemon"] == "pipelines.spark_daemon"
    assert [os.path.realpath(p) for p in got["workers"]] == [os.path.realpath(sys.executable)]


def test_the_same_interpreter_by_another_name_beside_it_is_ours(tmp_path: Path, monkeypatch) -> None:
    """PYSPARK_PYTHON naming this interpreter, as the JVM finds it: by its path, or by another
    name in its own directory (a virtualenv's python3 beside its python). Not the same file
    in another directory (another virtualenv's link to one base interpreter), not another
    file, not a name PATH does not hold."""
    from pipelines import spark

    real = Path(sys.executable).resolve()
    bin_dir, other = tmp_path / "venv" / "bin", tmp_path / "other" / "bin"
    for d in (bin_dir, other):
        d.mkdir(parents=True)
        (d / "python3").symlink_to(real)
    (bin_dir / "python").symlink_to(real)
    (bin_dir / "python2").write_text("#!/bin/sh\n")
    (bin_dir / "python2").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]))
    assert spark._same_python(None) and spark._same_python("")
    assert spark._same_python(str(bin_dir / "python"))
    assert spark._same_python(str(bin_dir / "python3")) and spark._same_python("python3")
    assert not spark._same_python(str(other / "python3"))
    assert not spark._same_python(str(bin_dir / "python2")) and not spark._same_python("python2")
    assert not spark._same_python("no-such-python")
    monkeypatch.setenv("PATH", os.pathsep.join([str(other), os.environ.get("PATH", "")]))
    assert not spark._same_python("python3")  # PATH's python3 is the other environment's


def test_a_conf_dir_with_only_spark_defaults_is_handed_over_as_a_properties_file(
        env: dict[str, str], tmp_path: Path) -> None:
    """Only where the launch stays the same: the defaults file (read by path only) and a log4j2
    file (read from the class path only when none is given) beside Spark's templates; never
    a conf dir holding what Spark reads from the class path or
    sources, never beside the user's own properties file or an agent of theirs, never for a JVM
    offsetlake does not launch. (A real JVM with it: tests/test_warm_up.py.)"""
    from pipelines.spark import _archive_launch

    def _conf_dir_handover(settings, env):  # the launch variables, whatever the archive's fate
        return _archive_launch(settings, {}, env)[1]

    conf = Path(env["SPARK_CONF_DIR"])
    env["OFFSETLAKE_JVM_CACHE"] = str(tmp_path / "cache")
    local = session_settings({}, env=env)
    assert _conf_dir_handover(local, env) == {}  # an empty conf dir needs nothing
    (conf / "spark-env.sh.template").write_text("# as Spark ships it\n")
    empty = str(tmp_path / "cache" / "empty-spark-conf")
    assert _conf_dir_handover(local, env) == {"SPARK_CONF_DIR": empty}
    assert not any(Path(empty).iterdir())
    (conf / "spark-defaults.conf").write_text("spark.sql.shuffle.partitions 7\n")
    handed = _conf_dir_handover(local, {**env, "PYSPARK_SUBMIT_ARGS": "--driver-memory 2g pyspark-shell"})
    assert handed == {"SPARK_CONF_DIR": empty, "PYSPARK_SUBMIT_ARGS":
                      f"--properties-file {conf / 'spark-defaults.conf'} --driver-memory 2g pyspark-shell"}
    assert _conf_dir_handover(local, env)["PYSPARK_SUBMIT_ARGS"].endswith(" pyspark-shell")
    for own in ("--properties-file /etc/mine.conf pyspark-shell", "--properties-file=/etc/mine.conf pyspark-shell",
                "--load-spark-defaults pyspark-shell"):
        assert _conf_dir_handover(local, {**env, "PYSPARK_SUBMIT_ARGS": own}) == {}
    assert _conf_dir_handover(local, {**env, "SPARK_SUBMIT_OPTS": "-Dx=1"})["SPARK_CONF_DIR"] == empty
    assert _conf_dir_handover(local, {**env, "SPARK_SUBMIT_OPTS": "-Dx=1 -javaagent:/a.jar"}) == {}
    assert _conf_dir_handover(local, {**env, "OFFSETLAKE_JVM_CACHE": "off"}) == {}
    cluster = session_settings({"spark.master": "spark://10.0.0.5:7077"}, env=env)
    assert _conf_dir_handover(cluster, env) == {}
    for other in ("spark-env.sh", "hive-site.xml", "metrics.properties", "log4j2-test.properties"):
        (conf / other).write_text("x\n")  # sourced by spark-class, or read from the class path
        assert _conf_dir_handover(local, env) == {}
        (conf / other).unlink()
    (conf / "log4j2.properties").write_text("rootLogger.level = warn\n")  # given by its path
    assert _conf_dir_handover(local, env) == {
        "SPARK_CONF_DIR": empty, "PYSPARK_SUBMIT_ARGS": f"--properties-file {conf / 'spark-defaults.conf'} pyspark-shell",
        "SPARK_SUBMIT_OPTS": f"-Dlog4j2.configurationFile={conf / 'log4j2.properties'}"}
    for named in ({"SPARK_SUBMIT_OPTS": "-Dlog4j.configurationFile=/etc/mine.xml"},
                  {"JAVA_TOOL_OPTIONS": "-Dlog4j2.configurationFile=/etc/mine.xml"},
                  {"LOG4J_CONFIGURATION_FILE": "/etc/mine.xml"}):  # the user names one: theirs
        assert _conf_dir_handover(local, {**env, **named}) == {}
    assert _archive_launch(local, {"spark.driver.extraJavaOptions": "-Dlog4j.configurationFile=/x"}, env)[1] == {}
    (conf / "log4j2.xml").write_text("<Configuration/>\n")
    assert _conf_dir_handover(local, env) == {}  # two: the class path's order decides
    (Path(empty) / "left-by-someone").write_text("")
    assert _conf_dir_handover(local, env) == {}  # ours must be empty to stand for theirs
