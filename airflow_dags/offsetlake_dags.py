"""offsetlake on Airflow: one DAG per configured cluster, ``offsetlake_<cluster_id>``.

Tasks: ``[demo_data] -> ingest -> snapshot -> reconcile -> maintain``

* ``demo_data`` (demo clusters only): ``python -m pipelines.demo`` when the data is missing;
* ``ingest``: the Structured Streaming ingest with ``--trigger available-now`` (process what
  exists, then stop), so a scheduled run is a bounded batch that resumes from its checkpoint;
* ``snapshot``: the live cluster's answers (or a recorded capture with ``recorded``);
* ``reconcile``: reconciliation + the Great Expectations gate; exit 1 = gate failed, which
  fails the run before maintenance touches the lake;
* ``maintain``: compaction, checkpoint, vacuum (>= 168 h retention).

Why this file holds no business logic: every task is the ``offsetlake`` CLI (runner
``bash``) or the ``jobs/<task>.py`` spark-submit entry points (runner ``spark-submit``), so
what Airflow runs is exactly what an operator runs by hand. This file only reads
``clusters.json`` (or ``$OFFSETLAKE_CLUSTERS_FILE``) and turns it into commands; it imports
nothing from ``pipelines`` so parsing stays fast and Spark-free.

Cluster settings reach the commands as environment variables rendered from the DAG params
(``OFFSETLAKE_LAKE`` = ``{{ params.lake }}``, ...) and referenced as ``"$VAR"``, so a
per-run override of a param is data for the shell, never code. The spark-submit command
line is built from the same parts SparkSubmitOperator takes (:func:`operator_kwargs`);
switching to the provider is ``SparkSubmitOperator(task_id=..., **operator_kwargs(c, t))``.

Secrets are never in this file's output: rendered commands and task environments are shown
in the UI and task logs. ``kafka_secrets`` maps a Kafka option to the *name* of an
environment variable of the worker (filled by the deployment's secret store); the command
holds only the reference, ``OFFSETLAKE_KAFKA_OPTION_SASL_PLAIN_PASSWORD="$KAFKA_PASSWORD"``,
which the task's shell resolves at run time, in the task process. ``kafka_options_file``
names a Java-properties file on the worker (like Kafka's ``--command-config``). ``${VAR}``
is expanded at parse time only in paths and names, never in ``env``, ``kafka_options`` or
``kafka_secrets``, and a secret-looking ``kafka_options``/``env`` entry is a config error.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Param

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CONFIG_ENV = "OFFSETLAKE_CLUSTERS_FILE"
DEFAULT_CONFIG = HERE / "clusters.json"

SOURCES = ("segments", "kafka", "spark-kafka")
ENGINES = ("delta-rs", "spark")
RUNNERS = ("bash", "spark-submit")
PIPELINE = ("ingest", "snapshot", "reconcile", "maintain")

# Retries/timeouts per task. Ingest and snapshot talk to brokers: retry with backoff.
# Reconcile is not retried: a failed gate is a finding, and re-running it on the same lake
# and snapshot gives the same verdict. Maintenance retries once (e.g. a commit conflict).
TASK_DEFAULTS: dict[str, dict[str, float]] = {
    "demo_data": {"retries": 1, "retry_delay_minutes": 1, "timeout_minutes": 15},
    "ingest": {"retries": 2, "retry_delay_minutes": 5, "timeout_minutes": 120},
    "snapshot": {"retries": 3, "retry_delay_minutes": 2, "timeout_minutes": 15},
    "reconcile": {"retries": 0, "retry_delay_minutes": 5, "timeout_minutes": 30},
    "maintain": {"retries": 1, "retry_delay_minutes": 10, "timeout_minutes": 60},
}
MAX_RETRY_DELAY = timedelta(minutes=30)

# DAG param -> the environment variable the task commands read it from (the CLI's own
# OFFSETLAKE_* defaults, plus the recorded-capture folder of the snapshot task).
PARAM_ENV = {
    "cluster_id": "OFFSETLAKE_CLUSTER_ID",
    "lake": "OFFSETLAKE_LAKE",
    "source": "OFFSETLAKE_SOURCE",
    "segments_path": "OFFSETLAKE_SEGMENTS_PATH",
    "bootstrap_servers": "OFFSETLAKE_BOOTSTRAP_SERVERS",
    "delta_engine": "OFFSETLAKE_DELTA_ENGINE",
    "recorded": "OFFSETLAKE_SNAPSHOT_RECORDED",
    "retention_hours": "OFFSETLAKE_RETENTION_HOURS",
    "strict": "OFFSETLAKE_STRICT",
}

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_PATH_KEYS = ("lake", "segments_path", "recorded", "repo", "python", "kafka_options_file")
# never expanded at parse time: an expanded secret would be rendered into commands/env
_NOT_EXPANDED = ("env", "kafka_options", "kafka_secrets")
# the same keys pipelines.redaction treats as secret (this file imports nothing from pipelines)
_SECRET_KEY = re.compile(r"password|passwd|secret|token|jaas|credential", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigError(ValueError):
    """clusters.json is wrong; the message names the file and the cluster."""


@dataclass(frozen=True)
class Cluster:
    """One configured cluster, validated, paths resolved."""

    cluster_id: str
    lake: str
    source: str
    runner: str
    delta_engine: str
    schedule: str | None
    start_date: datetime
    retention_hours: int
    python: str
    repo: str
    segments_path: str | None = None
    bootstrap_servers: str | None = None
    recorded: str | None = None
    description: str = ""
    demo: dict[str, Any] | None = None
    kafka_options: dict[str, str] = field(default_factory=dict)
    kafka_options_file: str | None = None
    kafka_secrets: dict[str, str] = field(default_factory=dict)  # option -> worker env var name
    env: dict[str, str] = field(default_factory=dict)
    spark: dict[str, Any] = field(default_factory=dict)
    tasks: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def dag_id(self) -> str:
        return "offsetlake_" + re.sub(r"[^A-Za-z0-9_.-]", "_", self.cluster_id)


# ----------------------------------------------------------------------------- config


def _expand(value: Any) -> Any:
    """``${VAR}`` / ``${VAR:-default}`` in every string of a JSON value, except under the
    keys of ``_NOT_EXPANDED`` (secrets must not be resolved at parse time)."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), value)
    if isinstance(value, dict):
        return {k: v if k in _NOT_EXPANDED else _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def _resolve(path: str | None, base: Path) -> str | None:
    """Relative paths are relative to the config file; URLs and absolute paths stay."""
    if not path or "://" in path:
        return path or None
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else (base / p).resolve())


def _merge(defaults: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for key, value in entry.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _cluster(raw: dict[str, Any], base: Path, where: str) -> Cluster:
    def need(cond: bool, message: str) -> None:
        if not cond:
            raise ConfigError(f"{where}: {message}")

    cid = raw.get("cluster_id")
    need(isinstance(cid, str) and bool(cid), "cluster_id is required")
    for key in _PATH_KEYS:
        raw[key] = _resolve(raw.get(key), base)
    demo = raw.get("demo")
    if demo:
        demo = {"partitions": 10, "scale": 1, "seed": 7, **demo}
        demo["data_dir"] = _resolve(demo.get("data_dir"), base)
        need(bool(demo["data_dir"]), "demo.data_dir is required")
        raw.setdefault("source", "segments")
        raw["segments_path"] = raw.get("segments_path") or demo["data_dir"]
        raw["recorded"] = raw.get("recorded") or str(Path(demo["data_dir"]) / "live")
    source, runner, engine = raw.get("source"), raw.get("runner"), raw.get("delta_engine")
    need(source in SOURCES, f"source must be one of {SOURCES}, got {source!r}")
    need(runner in RUNNERS, f"runner must be one of {RUNNERS}, got {runner!r}")
    need(engine in ENGINES, f"delta_engine must be one of {ENGINES}, got {engine!r}")
    need(bool(raw.get("lake")), "lake is required")
    need(source != "segments" or bool(raw.get("segments_path")),
         "source segments needs segments_path")
    need(source == "segments" or bool(raw.get("bootstrap_servers")),
         f"source {source} needs bootstrap_servers")
    need(bool(raw.get("recorded") or raw.get("bootstrap_servers")),
         "the snapshot needs bootstrap_servers or a recorded capture folder")
    retention = int(raw.get("retention_hours", 720))
    need(retention >= 168, f"retention_hours must be >= 168, got {retention}")
    unknown = set(raw.get("tasks") or {}) - set(TASK_DEFAULTS)
    need(not unknown, f"unknown tasks {sorted(unknown)}; known: {sorted(TASK_DEFAULTS)}")
    for section in ("kafka_options", "env"):
        for key, value in (raw.get(section) or {}).items():
            need(not _SECRET_KEY.search(str(key)),
                 f"{section}.{key}: secrets do not belong in clusters.json (rendered commands "
                 "and task environments are visible): name the worker's environment variable "
                 "holding it in kafka_secrets, or use kafka_options_file")
            need("$" not in str(value),
                 f"{section}.{key}: '$' references are not expanded here; a secret goes in "
                 "kafka_secrets as the name of the worker's environment variable")
    for key, var in (raw.get("kafka_secrets") or {}).items():
        need(isinstance(var, str) and bool(_ENV_NAME.match(var)),
             f"kafka_secrets.{key}: expected the NAME of an environment variable of the worker "
             f"(resolved at run time), got {'a value' if var else var!r}")
    start = datetime.fromisoformat(str(raw.get("start_date", "2026-01-01")))
    return Cluster(
        cluster_id=cid, lake=raw["lake"], source=source, runner=runner, delta_engine=engine,
        schedule=raw.get("schedule"),
        start_date=start if start.tzinfo else start.replace(tzinfo=timezone.utc),
        retention_hours=retention, python=raw.get("python") or sys.executable,
        repo=raw.get("repo") or str(REPO), segments_path=raw.get("segments_path"),
        bootstrap_servers=raw.get("bootstrap_servers"), recorded=raw.get("recorded"),
        description=raw.get("description", ""), demo=demo,
        kafka_options={str(k): str(v) for k, v in (raw.get("kafka_options") or {}).items()},
        kafka_options_file=raw.get("kafka_options_file"),
        kafka_secrets={str(k): str(v) for k, v in (raw.get("kafka_secrets") or {}).items()},
        env={str(k): str(v) for k, v in (raw.get("env") or {}).items()},
        spark=dict(raw.get("spark") or {}),
        tasks={t: {**TASK_DEFAULTS[t], **(raw.get("tasks") or {}).get(t, {})}
               for t in TASK_DEFAULTS})


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)


def load_clusters(path: Path | None = None) -> list[Cluster]:
    """The enabled clusters of the config file (``$OFFSETLAKE_CLUSTERS_FILE`` by default)."""
    path = path or config_path()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read offsetlake cluster config {path}: {exc}") from exc
    defaults = _expand(doc.get("defaults") or {})
    clusters: list[Cluster] = []
    for i, entry in enumerate(doc.get("clusters") or []):
        raw = _merge(defaults, _expand(entry))
        if not raw.get("enabled", True):
            continue
        clusters.append(_cluster(raw, path.parent, f"{path} clusters[{i}]"))
    ids = [c.cluster_id for c in clusters]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ConfigError(f"{path}: duplicate cluster_id {dupes}")
    return clusters


# ----------------------------------------------------------------------------- commands


def _flags(c: Cluster, task: str) -> list[tuple[str, str, bool]]:
    """(flag, param, optional) of a task's CLI flags; optional ones only when set."""
    common = [("--lake", "lake", False), ("--cluster-id", "cluster_id", False)]
    if task == "ingest":
        return [("--source", "source", False), *common, ("--delta-engine", "delta_engine", False),
                ("--path", "segments_path", True), ("--bootstrap-servers", "bootstrap_servers", True)]
    if task == "snapshot":
        if c.recorded:
            return [*common, ("--recorded", "recorded", False)]
        return [*common, ("--bootstrap-servers", "bootstrap_servers", False)]
    if task == "maintain":
        return [("--lake", "lake", False), ("--retention-hours", "retention_hours", False)]
    return common


def _fixed_args(c: Cluster, task: str) -> list[str]:
    args = ["--trigger", "available-now"] if task == "ingest" else []
    if _talks_to_kafka(c, task):
        for key, value in sorted(c.kafka_options.items()):
            args += ["--kafka-option", f"{key}={value}"]
        if c.kafka_options_file:
            args += ["--kafka-options-file", c.kafka_options_file]
    return args


def _talks_to_kafka(c: Cluster, task: str) -> bool:
    return (task == "ingest" and c.source != "segments") or (task == "snapshot" and not c.recorded)


def secret_env_prefix(c: Cluster, task: str) -> str:
    """``OFFSETLAKE_KAFKA_OPTION_<KEY>="$WORKER_VAR" `` per ``kafka_secrets`` entry: shell text
    holding references only, resolved by the task's shell at run time (a missing variable
    fails the task with its name, never the value)."""
    if not _talks_to_kafka(c, task):
        return ""
    parts = []
    for key, var in sorted(c.kafka_secrets.items()):
        name = "OFFSETLAKE_KAFKA_OPTION_" + re.sub(r"[^A-Za-z0-9]", "_", key).upper()
        parts.append(f'{name}="${{{var}:?{var} is not set on the worker}}"')
    return " ".join(parts) + " " if parts else ""


def cli_args(c: Cluster, task: str) -> str:
    """The task's CLI flags as shell text, values read from the params' env variables."""
    parts = []
    for flag, param, optional in _flags(c, task):
        var = PARAM_ENV[param]
        parts.append(f'${{{var}:+{flag} "${var}"}}' if optional else f'{flag} "${var}"')
    parts += [shlex.quote(a) for a in _fixed_args(c, task)]
    return " ".join(parts)


def _spark_submit(c: Cluster) -> str:
    """The configured spark-submit, else the one beside ``python`` (pip's pyspark), else PATH's."""
    if c.spark.get("spark_submit"):
        return str(c.spark["spark_submit"])
    beside = Path(c.python).with_name("spark-submit")
    return str(beside) if beside.exists() else "spark-submit"


def _spark_submit_prefix(c: Cluster, task: str) -> list[str]:
    s = c.spark
    cmd = [_spark_submit(c), "--master", s.get("master") or "local[2]"]
    if s.get("deploy_mode"):
        cmd += ["--deploy-mode", s["deploy_mode"]]
    cmd += ["--name", f"offsetlake-{task}-{c.cluster_id}"]
    for key, value in sorted((s.get("conf") or {}).items()):
        cmd += ["--conf", f"{key}={value}"]
    if s.get("py_files"):
        cmd += ["--py-files", s["py_files"]]
    if s.get("packages"):
        cmd += ["--packages", s["packages"]]
    return [*cmd, str(Path(c.repo) / "jobs" / f"{task}.py")]


def task_command(c: Cluster, task: str) -> str:
    """The bash command of one pipeline task (what BashOperator runs)."""
    if c.runner == "spark-submit":
        program = " ".join(shlex.quote(p) for p in _spark_submit_prefix(c, task))
    else:
        program = f"{shlex.quote(c.python)} -m pipelines.cli {task}"
    return f"{secret_env_prefix(c, task)}{program} {cli_args(c, task)}"


def demo_command(c: Cluster) -> str:
    """Generate the demo's segments and recorded live answers unless they are there."""
    assert c.demo is not None
    d = f'"${PARAM_ENV["segments_path"]}"'
    gen = (f"{shlex.quote(c.python)} -m pipelines.demo {d} --partitions {int(c.demo['partitions'])} "
           f"--scale {int(c.demo['scale'])} --seed {int(c.demo['seed'])}")
    return (f"if [ -f {d}/live/list_groups.json ] && [ -f {d}/capture_log.json ]; "
            f"then echo offsetlake demo data present in {d}; else {gen}; fi")


def task_env(c: Cluster) -> dict[str, str]:
    """Environment of every task: the params (rendered per run) and the cluster's ``env``."""
    env = {var: f"{{{{ params.{param} if params.{param} is not none else '' }}}}"
           for param, var in PARAM_ENV.items()}
    local: dict[str, str] = {}
    if c.runner == "spark-submit" and str(c.spark.get("master") or "local").startswith("local"):
        # spark-submit starts the driver with python3 from PATH otherwise (PLATFORM.md)
        local = {"PYSPARK_PYTHON": c.python, "PYSPARK_DRIVER_PYTHON": c.python}
    return {**local, **c.env, **env}


def operator_kwargs(c: Cluster, task: str) -> dict[str, Any]:
    """SparkSubmitOperator arguments equivalent to the spark-submit runner's command line
    (the master comes from the operator's Spark connection, ``spark.conn_id``)."""
    args: list[str] = []
    for flag, param, optional in _flags(c, task):
        if not optional or getattr(c, param):
            args += [flag, f"{{{{ params.{param} }}}}"]
    s = c.spark
    kwargs: dict[str, Any] = {
        "application": str(Path(c.repo) / "jobs" / f"{task}.py"),
        "application_args": args + _fixed_args(c, task),
        "name": f"offsetlake-{task}-{c.cluster_id}", "conf": dict(s.get("conf") or {}),
        "env_vars": task_env(c), "conn_id": s.get("conn_id", "spark_default"),
    }
    for key in ("py_files", "packages", "deploy_mode"):
        if s.get(key):
            kwargs[key] = s[key]
    return kwargs


# ----------------------------------------------------------------------------- DAGs


def _params(c: Cluster) -> dict[str, Param]:
    def text(value: str | None, description: str) -> Param:
        return Param(value, type=["null", "string"], description=description)

    return {
        "cluster_id": Param(c.cluster_id, type="string", minLength=1,
                            description="name stamped on every row of the lake"),
        "lake": Param(c.lake, type="string", minLength=1, description="lake root directory"),
        "source": Param(c.source, type="string", enum=list(SOURCES),
                        description="where ingest reads __consumer_offsets"),
        "segments_path": text(c.segments_path, "source segments: the data directory"),
        "bootstrap_servers": text(c.bootstrap_servers, "HOST:PORT[,...] of the cluster"),
        "delta_engine": Param(c.delta_engine, type="string", enum=list(ENGINES),
                              description="delta-rs (no JVM jars) or spark (delta-spark jars)"),
        "recorded": text(c.recorded, "snapshot from this recorded capture folder instead "
                                     "of the live cluster"),
        "retention_hours": Param(c.retention_hours, type="integer", minimum=168,
                                 description="vacuum retention = time-travel window"),
        "strict": Param(True, type="boolean",
                        description="fail the task on any unreadable byte, undecodable record, "
                                    "empty source or group id in two offsets partitions of one "
                                    "cluster (offsetlake --strict) instead of warning"),
    }


def _task(c: Cluster, task_id: str, command: str) -> BashOperator:
    t = c.tasks[task_id]
    return BashOperator(
        task_id=task_id, bash_command=command, env=task_env(c), append_env=True, cwd=c.repo,
        retries=int(t["retries"]), retry_delay=timedelta(minutes=t["retry_delay_minutes"]),
        retry_exponential_backoff=2.0 if t["retries"] > 1 else 0,
        max_retry_delay=MAX_RETRY_DELAY, execution_timeout=timedelta(minutes=t["timeout_minutes"]))


def build_dag(c: Cluster) -> DAG:
    """``[demo_data ->] ingest -> snapshot -> reconcile -> maintain`` for one cluster."""
    # worst case: every try of every task times out, with the longest retry delays between
    tasks = [t for name, t in c.tasks.items() if c.demo or name != "demo_data"]
    runtime = sum(t["timeout_minutes"] * (t["retries"] + 1)
                  + t["retries"] * MAX_RETRY_DELAY.total_seconds() / 60 for t in tasks)
    with DAG(
        dag_id=c.dag_id,
        description=c.description or f"offsetlake pipeline of cluster {c.cluster_id}",
        schedule=c.schedule, start_date=c.start_date, catchup=False, max_active_runs=1,
        dagrun_timeout=timedelta(minutes=runtime), params=_params(c),
        default_args={"owner": "offsetlake", "depends_on_past": False},
        tags=["offsetlake", f"cluster:{c.cluster_id}", f"runner:{c.runner}"],
        doc_md=__doc__,
    ) as dag:
        chain = [_task(c, "demo_data", demo_command(c))] if c.demo else []
        chain += [_task(c, task, task_command(c, task)) for task in PIPELINE]
        for upstream, downstream in itertools.pairwise(chain):
            upstream >> downstream
    return dag


for _cluster_config in load_clusters():
    globals()[_cluster_config.dag_id] = build_dag(_cluster_config)
