"""The stock-price application (seed 000): its routes and its application file."""
