"""Which checkpoint directory `kiq retire` may delete on the operator's machine.

The path comes from a table declaration, which whoever may write the table catalog wrote,
and travels through a node's answer: a claim, not a fact. kiq deletes it only when it is,
symlinks resolved, exactly the retired pipeline version's own directory right under the
checkpoint root this machine is configured with (``[spark] checkpoint_dir``, or ``--checkpoint``):
``ROOT/PIPELINE`` for v1, ``ROOT/PIPELINE@VERSION`` for another version, as
``kiq pipeline run`` names it (kiq.pipelines.runner). Anything else is kept, and the
operator is told why.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

from kiq.tables.versions import DEFAULT_VERSION, VERSION_MARK, run_name

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# A pipeline's name as it becomes a directory (kiq.pipelines.targets): no separator, and
# never "." or ".." alone.
_PIPELINE = re.compile(r"(?!\.+$)[A-Za-z0-9._-]{1,200}")


def checkpoint_to_drop(where: str, root: str, run: str | None, version: str) -> Path | str:
    """The directory to delete, or why none is (a sentence for the operator).

    ``where``: the checkpoint the node answered; ``root``: the configured checkpoint root
    (``SparkSettings.checkpoint_root``); ``run``: the pipeline version the node said wrote
    it; ``version``: the version the operator retired."""
    if _SCHEME.match(where) and urlsplit(where).scheme != "file":
        return (
            f"checkpoint {where} is no longer used: delete it there "
            "(kiq does not delete remote storage)"
        )
    path = Path(unquote(urlsplit(where).path)) if where.startswith("file:") else Path(where)
    keep = f"checkpoint {where} kept"
    if not run or not _is_run(run, version):
        return f"{keep}: the node named no pipeline version {version} wrote it; delete it yourself"
    if _SCHEME.match(root):
        return f"{keep}: the checkpoint root is {root}, not a directory here; delete it yourself"
    base = Path(root).resolve()
    expected = base / run
    if len(expected.parts) < 3 or expected == Path.home() or base == Path.home():
        return (
            f"{keep}: kiq deletes only a directory below a top-level one, not the home "
            "directory; delete it yourself"
        )
    if not path.is_absolute() or path.resolve() != expected:
        return (
            f"{keep}: it is not {expected}, the directory of {run} under the checkpoint root "
            "(symlinks resolved). If the pipeline ran with another root, retire with "
            "--checkpoint ROOT; else delete it yourself"
        )
    if not expected.exists():
        return (
            f"checkpoint {expected} is no longer used: it is not on this machine, "
            "delete it where the pipeline ran"
        )
    if not expected.is_dir():
        return f"checkpoint {expected} is not a directory: left as it is"
    return expected


def drop_checkpoint(where: str, root: str, run: str | None, version: str) -> str:
    """Delete the checkpoint if ``checkpoint_to_drop`` finds it is the run's; what was done."""
    found = checkpoint_to_drop(where, root, run, version)
    if isinstance(found, str):
        return found
    shutil.rmtree(found)  # refuses a symlink itself, and never follows one inside
    return f"deleted checkpoint {found}"


def _is_run(run: str, version: str) -> bool:
    """Whether ``run`` is how ``kiq pipeline run --version VERSION`` names a run."""
    pipeline = run if version == DEFAULT_VERSION else run.removesuffix(f"{VERSION_MARK}{version}")
    return bool(_PIPELINE.fullmatch(pipeline)) and run_name(pipeline, version) == run
