"""The applications kiq ships, built only on its public API (``from kiq import ...``)."""
