from pathlib import Path

import pytest

from speaking import write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The listening tests' corpus (tests/speaking.py's TEXTS), written once per module."""
    return write_corpus(tmp_path_factory.mktemp("corpus") / "texts.jsonl")
