"""TLS from ``TlsSettings``: what the server loads, and the one context peers are called with.

A node with a certificate serves HTTPS (granian reads the PEM files itself) and
calls its peers over HTTPS, verifying them against ``--tls-ca`` (else the
system's roots): one context per process, made once, shared by every
connection of the peer pool and by kiq's own health checks of its nodes.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from urllib.parse import urlsplit

from kiq.errors import ConfigError
from kiq.settings import ServeSettings, TlsSettings

__all__ = ["advertised", "client_context", "scheme", "server_files"]


def scheme(tls: TlsSettings) -> str:
    return "https" if tls.enabled else "http"


def server_files(tls: TlsSettings) -> tuple[Path, Path] | None:
    """(certificate, key) for the server, checked to belong together; None without TLS."""
    if tls.cert is None or tls.key is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(tls.cert, tls.key)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"TLS certificate {tls.cert} and key {tls.key} do not load together ({exc.reason}): "
            "give a PEM certificate chain and its own unencrypted private key"
        ) from exc
    return tls.cert.resolve(), tls.key.resolve()


def client_context(ca: Path | None) -> ssl.SSLContext:
    """What a client verifies a kiq node with: only ``ca`` (a PEM bundle), else the
    system's roots. A cluster's own CA replaces the public ones: a certificate any
    public CA signed is no proof of being a member."""
    try:
        return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"TLS CA bundle {ca} holds no usable PEM certificate: {exc}") from exc


def advertised(serve: ServeSettings, tls: TlsSettings) -> ServeSettings:
    """``serve`` with the URL its peers use in the scheme the node serves.

    Without ``--advertise`` the URL is made from host and port; one given must
    agree with the scheme, or peers would speak plain HTTP to a TLS port.
    """
    wanted = scheme(tls)
    if not serve.advertise:
        return serve.model_copy(update={"advertise": f"{wanted}://{serve.host}:{serve.port}"})
    given = urlsplit(serve.advertise).scheme
    if given != wanted:
        raise ConfigError(
            f"--advertise {serve.advertise} is {given or 'schemeless'}, but this node serves "
            f"{wanted}: advertise a {wanted}:// URL"
        )
    return serve
