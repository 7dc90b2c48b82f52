"""The HTTP API every node serves: lookups, scans, metadata, health, metrics."""

from kiq.api.app import create_app

__all__ = ["create_app"]
