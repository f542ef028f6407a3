"""spark-submit entry point: `spark-submit jobs/ingest.py [offsetlake ingest flags]`."""

import sys

from pipelines.cli import main

if __name__ == "__main__":
    sys.exit(main(["ingest", *sys.argv[1:]]))
