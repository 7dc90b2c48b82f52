"""Page views: the application `kiq new NAME` writes, and a shipped example of its own."""
