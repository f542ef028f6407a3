"""spark-submit entry point: `spark-submit jobs/maintain.py [offsetlake maintain flags]`."""

import sys

from pipelines.cli import run

if __name__ == "__main__":
    run(["maintain", *sys.argv[1:]])
