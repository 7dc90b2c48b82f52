"""Word count (seed 001): its routes."""
