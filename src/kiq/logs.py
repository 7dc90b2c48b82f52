"""Logging set-up for kiq processes: one line per event, key=value, easy to grep."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level.upper(), format=FORMAT)
    # py4j logs every gateway call at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # A line per request at INFO: the CLI's own output says what was asked and answered.
    logging.getLogger("httpx").setLevel(logging.WARNING)
