"""spark-submit entry point: `spark-submit jobs/reconcile.py [offsetlake reconcile flags]`."""

import sys

from pipelines.cli import main

if __name__ == "__main__":
    sys.exit(main(["reconcile", *sys.argv[1:]]))
