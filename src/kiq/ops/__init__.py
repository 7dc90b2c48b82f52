"""What operators use: the dashboard and its page, the cluster's metadata, health and
metrics, the table versions (``kiq diff``/``switch``/``retire``), and which members a node
names (only proven ones). The core API's handlers answer their routes from here."""
