"""Word count (seed 001): pipeline and routes."""
