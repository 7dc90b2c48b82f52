"""Settings of `kiq feed`: TOML table ``[feed]``, environment ``KIQ_FEED_*``, flags.

``exchanges`` is a list in TOML; the flag and the environment variable take it
comma-separated (``NYSE,NASDAQ``) or as a JSON list.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from kiq import catalog
from kiq.feeds.symbols import SYMBOLS
from kiq.feeds.ticks import EXCHANGE_RE
from kiq.settings import _Section

DEFAULT_EXCHANGES = catalog.STOCK_EXCHANGES


class FeedSettings(_Section):
    """A tick feed into Kafka: `kiq feed stocks` and `kiq feed replay`."""

    table: ClassVar[str] = "feed"
    model_config = SettingsConfigDict(env_prefix="KIQ_FEED_", frozen=True, extra="forbid")

    bootstrap: str = "127.0.0.1:9092"
    topic: str = Field(
        catalog.STOCK_TICKS, min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$"
    )
    symbols: int = Field(100, ge=1, le=len(SYMBOLS), description="how many symbols tick")
    exchanges: Annotated[list[str], NoDecode] = Field(default_factory=lambda: [*DEFAULT_EXCHANGES])
    rate: float = Field(1000.0, gt=0, description="ticks per second")
    seed: int = 42
    trade_ratio: float = Field(0.3, ge=0, le=1, description="share of ticks carrying a trade")
    create_topic: bool = True
    partitions: int = Field(30, ge=1, description="of the topic, when kiq creates it")
    linger_ms: int = Field(5, ge=0, le=1000)

    @field_validator("exchanges", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"not a JSON list: {exc}") from exc
            return [part.strip() for part in text.split(",")]
        return value

    @field_validator("exchanges")
    @classmethod
    def _check(cls, value: list[str]) -> list[str]:
        names = [name.upper() for name in value]
        bad = [name for name in names if not EXCHANGE_RE.fullmatch(name)]
        if not names or bad:
            raise ValueError(
                "give exchange names, comma-separated, like NYSE,NASDAQ,IEX "
                f"(each matching {EXCHANGE_RE.pattern}); bad: {bad or 'empty list'}"
            )
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"each exchange once, please; repeated: {', '.join(duplicates)}")
        return names
