"""spark-submit entry point: `spark-submit jobs/snapshot.py [offsetlake snapshot flags]`."""

import sys

from pipelines.cli import run

if __name__ == "__main__":
    run(["snapshot", *sys.argv[1:]])
