"""The `kiq` command line."""
