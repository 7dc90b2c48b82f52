"""Logging set-up for kiq processes: one line per event, key=value, easy to grep."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level.upper(), format=FORMAT)
    # py4j logs every gateway call at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
