"""Word count (seed 001)."""
