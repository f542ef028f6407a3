"""spark-submit entry point: `spark-submit jobs/report.py [offsetlake report flags]`."""

import sys

from pipelines.cli import run

if __name__ == "__main__":
    run(["report", *sys.argv[1:]])
