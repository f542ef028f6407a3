"""spark-submit entry point: `spark-submit jobs/maintain.py [offsetlake maintain flags]`."""

import sys

from pipelines.cli import main

if __name__ == "__main__":
    sys.exit(main(["maintain", *sys.argv[1:]]))
