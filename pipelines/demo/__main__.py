"""``python -m pipelines.demo OUT_DIR [--partitions N] [--scale S] [--seed N] ...``.

Why: the Makefile, the README and the Airflow DAG generate demo data this way.
"""

import sys

from pipelines.demo.generate import main

if __name__ == "__main__":
    sys.exit(main())
