"""The ``[limits]`` flags a node takes, declared once for ``kiq serve`` and ``kiq up``
(which passes them to every node it starts): the same names, help and defaults."""

from __future__ import annotations

from typing import Annotated

import typer

from kiq import settings
from kiq.cli.defaults import with_default

_LIMITS = settings.LimitsSettings

HeaderTimeout = Annotated[
    float | None,
    typer.Option(
        help=with_default(
            "seconds to send headers, and to idle between requests", _LIMITS, "header_timeout_s"
        ),
    ),
]
MaxBodyBytes = Annotated[
    int | None,
    typer.Option(help=with_default("largest request body", _LIMITS, "max_body_bytes")),
]
MaxConnections = Annotated[
    int | None,
    typer.Option(help=with_default("open connections; more wait", _LIMITS, "max_connections")),
]
MaxMultigetKeys = Annotated[
    int | None,
    typer.Option(help=with_default("keys per multiget", _LIMITS, "max_multiget_keys")),
]
RateBurst = Annotated[
    int | None,
    typer.Option(
        help=with_default("requests at once per client; 0: one second's", _LIMITS, "rate_burst")
    ),
]
RateLimit = Annotated[
    float | None,
    typer.Option(help=with_default("requests/s per client, 0 off", _LIMITS, "rate_limit")),
]
