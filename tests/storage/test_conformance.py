from pathlib import Path

import pytest

from kassette import LocalStorage, MemoryStorage
from kassette.testing import StorageConformance


class TestLocalStorage(StorageConformance):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> LocalStorage:
        return LocalStorage(tmp_path / "journals")


class TestMemoryStorage(StorageConformance):
    @pytest.fixture
    def storage(self) -> MemoryStorage:
        return MemoryStorage()
