"""Shared fixtures: the read-only corpus in ../shared and one session-wide SparkSession."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("OFFSETLAKE_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpus"


def corpus_path(*parts: str) -> Path:
    """Path inside ../shared/corpus, or skip the test with the reason when it is absent."""
    path = CORPUS.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared corpus is only beside CI and developer checkouts")
    return path


@pytest.fixture(scope="session")
def public_corpus() -> Path:
    return corpus_path("public")


@pytest.fixture(scope="session")
def golden_dir() -> Path:
    return corpus_path("golden")


@pytest.fixture(scope="session")
def scenario_a() -> Path:
    return corpus_path("golden", "scenario-a")
