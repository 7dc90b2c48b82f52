"""kiq.testing's Spark session, stopped at the end of the run, before the run's reaper
(tests/conftest.py) ends what is left: its JVM then goes without Spark's complaints."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kiq.testing._session import stop_session


@pytest.fixture(scope="session", autouse=True)
def _stop_kiq_testing_spark() -> Iterator[None]:
    yield
    stop_session()
