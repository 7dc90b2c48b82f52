"""Benchmarks that start what they need on loopback, measure, and stop everything."""
