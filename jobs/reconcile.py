"""spark-submit entry point: `spark-submit jobs/reconcile.py [offsetlake reconcile flags]`."""

import sys

from pipelines.cli import run

if __name__ == "__main__":
    run(["reconcile", *sys.argv[1:]])
