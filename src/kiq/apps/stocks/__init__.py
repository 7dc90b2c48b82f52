"""The stock-price application (seed 000): pipeline, routes and application file."""
