"""Securing kiq: TLS for the API and between nodes, and the cluster's credentials."""
