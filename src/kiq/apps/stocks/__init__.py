"""The stock application (seed 000): ticks → quotes, day statistics and one-minute bars."""
