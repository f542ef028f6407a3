"""Quiet by default: no Spark/JVM banner, no console progress bar, no kafka-python chatter;
``--verbose`` brings them back. Why: a scheduler's log should show problems, not noise.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.spark import QUIET_LOG4J, session_settings
from tests.conftest import REPO
from tests.support.generated import generated_scenario


def test_spark_console_progress_and_banners_off_unless_verbose() -> None:
    quiet = session_settings({}, env={})
    assert quiet.conf["spark.ui.showConsoleProgress"] == "false"
    assert QUIET_LOG4J is not None and "rootLogger.level = warn" in QUIET_LOG4J.read_text()
    assert str(QUIET_LOG4J) in quiet.conf["spark.driver.defaultJavaOptions"]
    verbose = session_settings({}, env={"OFFSETLAKE_SPARK_QUIET": "false"})
    assert "spark.ui.showConsoleProgress" not in verbose.conf
    assert "spark.driver.defaultJavaOptions" not in verbose.conf
    mine = session_settings({"spark.ui.showConsoleProgress": "true",
                             "spark.driver.extraJavaOptions": "-Dx=1"}, env={})
    assert "spark.ui.showConsoleProgress" not in mine.conf  # the user's setting stands
    assert "spark.driver.extraJavaOptions" not in mine.conf  # and their options are theirs:
    assert str(QUIET_LOG4J) in mine.conf["spark.driver.defaultJavaOptions"]  # still quiet
    admins = session_settings({"spark.driver.defaultJavaOptions": "-Dy=1"}, env={})
    assert "spark.driver.defaultJavaOptions" not in admins.conf


def test_kafka_python_chatter_is_at_warning(tmp_path: Path) -> None:
    from pipelines.cli import main

    logging.getLogger("kafka").setLevel(logging.NOTSET)
    main(["decode", "--stats", str(tmp_path)])
    assert logging.getLogger("kafka").level == logging.WARNING


@pytest.mark.spark
@pytest.mark.slow
def test_ingest_prints_only_its_summary(tmp_path: Path) -> None:
    data = generated_scenario(tmp_path / "gen") / "segments"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OFFSETLAKE_SPARK_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "ingest", "--source", "segments",
                           "--path", str(data), "--lake", str(tmp_path / "lake"),
                           "--max-records-per-batch", "2000"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    # no log4j profile/level notice, no NativeCodeLoader, no [Stage 0:, and not the JDK's
    # "WARNING: Using incubator modules: jdk.incubator.vector" for Spark's --add-modules
    assert done.stderr == ""
    assert '"records": ' in done.stdout
    # verbose, the JVM's own output comes through (forwarded by pipelines.jvm_output), the
    # JDK's notice still not
    env["OFFSETLAKE_SPARK_QUIET"] = "false"
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "ingest", "--source", "segments",
                           "--path", str(data), "--lake", str(tmp_path / "lake2")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Using Spark's default log4j profile" in done.stderr
    assert "incubator" not in done.stderr
    assert '"records": ' in done.stdout
