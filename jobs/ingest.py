"""spark-submit entry point: `spark-submit jobs/ingest.py [offsetlake ingest flags]`."""

import sys

from pipelines.cli import run

if __name__ == "__main__":
    run(["ingest", *sys.argv[1:]])
