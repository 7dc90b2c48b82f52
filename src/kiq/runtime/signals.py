"""The signals that ask a long-running kiq process to stop, gracefully.

A Ctrl-C, a SIGTERM (systemd, Kubernetes, ``kill``), and a SIGHUP: a closed terminal
sends it to the jobs it ran, and its default would end the process at once, without
leaving its group or closing its stores. No kiq process reloads on SIGHUP.
"""

from __future__ import annotations

import signal

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
