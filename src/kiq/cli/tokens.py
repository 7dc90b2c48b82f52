"""The one door every command takes a bearer token through: a file or the environment.

A token on the command line (``--token T``) is in the process's argv, which every local
user reads (``ps``, ``/proc/PID/cmdline``), and in shell history; an admin token there can
switch and retire tables. So a token comes from ``--token-file FILE`` (refused when group or
other users may write it, named in a warning when they may read it, as the node treats its
secret files: kiq.security.keys) or from ``KIQ_TOKEN``. ``--token`` still works, with a
warning, so scripts keep running until they move.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated

import typer

from kiq.cli.context import err_console
from kiq.errors import ConfigError

# The environment variable every command reads a token from.
TOKEN_ENV = "KIQ_TOKEN"

TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="deprecated: a token here shows in `ps` to every local user; use --token-file "
        f"or ${TOKEN_ENV}",
    ),
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help=f"file holding the bearer token (mode 600), on a cluster with authentication; "
        f"else ${TOKEN_ENV}",
    ),
]


def bearer_token(
    token: str | None, token_file: Path | None, *, older_env: tuple[str, ...] = ()
) -> str | None:
    """The token a command sends: ``--token-file``'s, else the environment's (``older_env``,
    a command's own name from before, then ``$KIQ_TOKEN``), else ``--token``'s with a
    warning; None: none. Both flags at once is a ``ConfigError``."""
    if token and token_file is not None:
        raise ConfigError("give the token once: --token-file FILE (or $KIQ_TOKEN), not --token")
    if token_file is not None:
        return read_token_file(token_file)
    for name in (*older_env, TOKEN_ENV):
        found = os.environ.get(name, "").strip()
        if found:
            return found
    if token:
        err_console.print(
            "[yellow]warning:[/] --token shows the token to every local user (ps, "
            f"/proc): put it in a file for --token-file (chmod 600), or in ${TOKEN_ENV}",
            soft_wrap=True,
            highlight=False,
        )
        return token.strip()
    return None


def read_token_file(path: Path) -> str:
    """The token in ``path``, surrounding whitespace dropped; refused when the file is empty
    or group or other users may write it (they could hand the command their own token)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ConfigError(f"--token-file {path} cannot be read: {exc.strerror}") from exc
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "every user" if mode & stat.S_IWOTH else "its group"
        raise ConfigError(
            f"--token-file {path} is writable by {who}, so another user could replace the "
            f"token: run `chmod 600 {path}`"
        )
    # The node's own check for secret files (refused if anyone may write it, a warning if
    # others may read it), on the file as opened. Imported here: `kiq --help` need not load
    # the crypto libraries.
    from kiq.security.keys import read_key_file

    raw = read_key_file(path, "--token-file", secret=True)
    try:
        token = raw.decode().strip()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--token-file {path} is not text: it should hold the token") from exc
    if not token:
        raise ConfigError(f"--token-file {path} is empty: it should hold the token")
    return token
