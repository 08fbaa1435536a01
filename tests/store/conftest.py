import pytest


@pytest.fixture
def root(tmp_path):
    return tmp_path / "store"
