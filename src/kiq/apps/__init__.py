"""The applications kiq ships, built only on the public API (``from kiq import ...``)."""
