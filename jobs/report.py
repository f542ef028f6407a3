"""spark-submit entry point: `spark-submit jobs/report.py [offsetlake report flags]`."""

import sys

from pipelines.cli import main

if __name__ == "__main__":
    sys.exit(main(["report", *sys.argv[1:]]))
