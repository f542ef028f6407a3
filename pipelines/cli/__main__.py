"""``python -m pipelines.cli``: the same entry point as the ``offsetlake`` script."""

from pipelines.cli import run

run()
