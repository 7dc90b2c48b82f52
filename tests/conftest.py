"""Shared test set-up: integration tests are marked by where they live."""

from __future__ import annotations

from pathlib import Path

import pytest

_INTEGRATION = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
