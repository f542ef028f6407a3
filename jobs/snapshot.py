"""spark-submit entry point: `spark-submit jobs/snapshot.py [offsetlake snapshot flags]`."""

import sys

from pipelines.cli import main

if __name__ == "__main__":
    sys.exit(main(["snapshot", *sys.argv[1:]]))
