"""The docs site's reference pages, generated from the code at build time (an mkdocs hook).

mkdocs.yml names this file under ``hooks:``; ``on_files`` adds three pages that exist
only in the built site, never in docs/, so none can drift from what it describes:

- reference/configuration.md: every section of the settings tree (kiq.settings), each
  setting with its type, default, environment variable, flag and description, read
  from the pydantic models;
- reference/cli.md: every `kiq` command from the Typer app's click tree, with its
  arguments and options, their defaults and help;
- reference/http.md: every route of the core HTTP API from the OpenAPI document a node
  serves at /openapi.json (built in process from the same route table).

Each ``*_markdown`` function is plain Python, so tests/unit/docs/ builds the pages
without mkdocs and checks them against the code.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

# The module that holds the settings tree: every BaseSettings section with a TOML ``table``.
SETTINGS_MODULES = ("kiq.settings",)

PAGES = {
    "reference/configuration.md": "configuration_markdown",
    "reference/cli.md": "cli_markdown",
    "reference/http.md": "http_markdown",
}


# --- configuration ---------------------------------------------------------------------


def sections() -> list[type[Any]]:
    """Every section of the settings tree, in the order its modules define them."""
    from pydantic_settings import BaseSettings

    found: list[type[Any]] = []
    for name in SETTINGS_MODULES:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseSettings)
                and value.__module__ == name
                and isinstance(getattr(value, "table", None), str)
                and value not in found
            ):
                found.append(value)
    return found


def env_name(section: type[Any], name: str) -> str:
    """The environment variable of setting ``name``, as pydantic-settings reads it."""
    return f"{section.model_config.get('env_prefix', '')}{name.upper()}"


def flag_name(section: type[Any], name: str) -> str:
    """The flag of setting ``name``, as kiq.settings names it in its messages."""
    names: dict[str, str] = getattr(section, "flag_names", {})
    prefix: str = getattr(section, "flag_prefix", "")
    return names.get(name, f"--{prefix}{name.replace('_', '-')}")


def default_of(field: Any) -> Any:
    """A field's default as a fresh settings object would hold it (a factory called)."""
    if field.default_factory is not None:
        return field.default_factory()
    return field.default


def show_default(value: Any) -> str:
    """A default as the reference writes it: TOML-like, paths relative to where kiq runs."""
    if value is None:
        return "unset"
    if isinstance(value, Path):
        return str(_relative(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | dict):
        return json.dumps(value)
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump())
    return repr(value)


def _relative(path: Path) -> Path:
    """A default computed where the build runs (the jar cache), told relative to it."""
    if not path.is_absolute():
        return path
    for base in (Path.cwd(), Path.home()):
        if path.is_relative_to(base):
            return (
                path.relative_to(base) if base == Path.cwd() else Path("~") / path.relative_to(base)
            )
    return path


def show_type(field: Any) -> str:
    text = (
        str(field.annotation)
        if not isinstance(field.annotation, type)
        else field.annotation.__name__
    )
    for noise in ("typing.", "pathlib.", "typing_extensions.", "<class '", "'>"):
        text = text.replace(noise, "")
    text = text.replace("Annotated[list[str], NoDecode]", "list[str]")
    return text.replace("|", "\\|")


def _cell(text: str) -> str:
    """``text`` on one line of a table cell: pipes escaped, and brackets, which would
    read as links (`[,sep=C]`)."""
    text = " ".join(text.split())
    for char in "|[]":
        text = text.replace(char, "\\" + char)
    return text


def setting_rows(section: type[Any]) -> Iterator[tuple[str, str, str, str, str, str]]:
    """(name, type, default, environment, flag, description) of each of ``section``'s settings."""
    for name, field in section.model_fields.items():
        yield (
            name,
            show_type(field),
            show_default(default_of(field)),
            env_name(section, name),
            flag_name(section, name),
            _cell(field.description or ""),
        )


def cli_flags() -> set[str]:
    """Every option name some `kiq` command takes."""
    import typer

    from kiq.cli.main import app

    root = typer.main.get_command(app)
    return {
        name
        for _, command in _commands(root, ("kiq",))
        for param in command.params
        for name in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ()))
    }


def configuration_markdown() -> str:
    out = [
        "# Configuration reference",
        "",
        "Generated from the settings tree (`src/kiq/settings.py`) when the docs are built:",
        "every section, setting, type, default, environment variable and description. How",
        "the file, the environment and the flags combine:",
        "[Configuration](../guides/configuration.md).",
        "",
        "Every setting has one name, used three ways: the key of a table in the TOML file",
        "(`[serve] port`), an environment variable (`KIQ_SERVE_PORT`) and, where a command",
        "takes it, a flag (`--port`; which commands: the [CLI reference](cli.md)).",
        "Flags beat the environment, which beats the file, which beats these defaults. Lists",
        "and tables are given to the environment as JSON. A default computed where kiq runs",
        "(the jar cache) is shown as the build saw it.",
        "",
    ]
    flags = cli_flags()
    for section in sections():
        out += [f"## `[{section.table}]`", ""]
        doc = inspect.getdoc(section) or ""
        if doc:
            out += [doc.replace("``", "`"), ""]
        out += [
            "| setting | type | default | environment | flag | description |",
            "|---|---|---|---|---|---|",
        ]
        for name, kind, default, env, flag, description in setting_rows(section):
            shown = f"`{flag}`" if flag in flags else ""
            out.append(f"| `{name}` | `{kind}` | `{default}` | `{env}` | {shown} | {description} |")
        out.append("")
        for name, field in section.model_fields.items():
            model = field.annotation
            if isinstance(model, type) and issubclass(model, BaseModel):
                out += _nested_table(f"{section.table}.{name}", model, env_name(section, name))
    return "\n".join(out)


def _nested_table(table: str, model: type[BaseModel], env: str) -> list[str]:
    """A table of settings inside a section (``[limits.tenants]``): its keys, given to the
    environment together as one JSON object."""
    out = [f"### `[{table}]`", ""]
    doc = inspect.getdoc(model) or ""
    if doc:
        out += [doc.replace("``", "`"), ""]
    out += [
        f"In the environment: `{env}`, a JSON object of these keys.",
        "",
        "| key | type | default | description |",
        "|---|---|---|---|",
    ]
    for name, field in model.model_fields.items():
        default = show_default(default_of(field))
        description = _cell(field.description or "")
        out.append(f"| `{name}` | `{show_type(field)}` | `{default}` | {description} |")
    out.append("")
    return out


# --- CLI -------------------------------------------------------------------------------


def _commands(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name in sorted(getattr(command, "commands", {})):
        yield from _commands(command.commands[name], (*path, name))


def _param_row(param: Any) -> str:
    from kiq.cli.defaults import split_default

    if param.param_type_name == "argument":
        name = f"`{(param.metavar or param.name or '').upper()}`"
        kind = "argument" + (", repeatable" if param.nargs == -1 else "")
        flag = False
    else:
        name = ", ".join(f"`{o}`" for o in (*param.opts, *param.secondary_opts))
        flag = bool(param.is_flag)
        kind = "flag" if flag else "option"
        if param.multiple:
            kind += ", repeat"
    help_text, stated = split_default(getattr(param, "help", None) or "")
    default = param.default
    if stated is not None:  # a setting's default, which the help takes from the settings tree
        shown = f"`{stated}`"
    elif callable(default) or default is None or default == () or default == []:
        shown = ""
    elif flag and isinstance(default, bool):
        shown = f"`{str(default).lower()}`"
    else:
        shown = f"`{show_default(default)}`"
    envvar = param.envvar if isinstance(param.envvar, str) else ""
    help_text = _cell(help_text)
    if envvar:
        help_text = f"{help_text} (env `{envvar}`)".strip()
    return f"| {name} | {kind} | {shown} | {help_text} |"


def cli_markdown() -> str:
    import typer

    from kiq.cli.main import app

    root = typer.main.get_command(app)
    out = [
        "# CLI reference",
        "",
        "Generated from the `kiq` command's own tree (`src/kiq/cli/`) when the docs are",
        "built: every command, its arguments and options, their defaults and help.",
        "An option that sets a setting shows the settings tree's default, which the",
        "environment and the file may change: the [configuration reference](configuration.md)",
        "has each setting. `kiq COMMAND --help` prints the same.",
        "",
    ]
    for path, command in _commands(root, ("kiq",)):
        title = " ".join(path)
        out += [f"## `{title}`", ""]
        text = inspect.cleandoc(command.help or "")
        if text:
            out += [text, ""]
        params = [p for p in command.params if p.name != "help" and not getattr(p, "hidden", False)]
        if params:
            out += ["| name | kind | default | help |", "|---|---|---|---|"]
            out += [_param_row(p) for p in params]
            out.append("")
        children = sorted(getattr(command, "commands", {}))
        if children:
            links = ", ".join(f"[`{c}`](#{_anchor(' '.join((*path, c)))})" for c in children)
            out += [f"Commands: {links}.", ""]
    return "\n".join(out)


def _anchor(title: str) -> str:
    """The id mkdocs' toc gives the heading ``title`` (code spans dropped, spaces to -)."""
    return "-".join(title.lower().replace("_", "_").split()).replace("`", "")


# --- HTTP ------------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the core HTTP API, as a node checking tokens serves it."""
    from kiq.api import openapi
    from kiq.api.routes import CORE

    return openapi.document(CORE, secured=True)


def _schema_text(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    kind = schema.get("type", "")
    if kind == "array":
        return f"array of {_schema_text(schema.get('items', {}))}"
    if "anyOf" in schema:
        return " or ".join(_schema_text(s) for s in schema["anyOf"])
    bounds = [
        f"{k} {schema[k]}" for k in ("minimum", "maximum", "minLength", "maxLength") if k in schema
    ]
    if "enum" in schema:
        bounds.append("one of " + ", ".join(str(v) for v in schema["enum"]))
    return f"{kind}" + (f" ({', '.join(bounds)})" if bounds else "")


def _operations(doc: dict[str, Any]) -> Iterable[tuple[str, str, dict[str, Any]]]:
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            yield path, method.upper(), op


def http_markdown() -> str:
    doc = openapi_document()
    responses = doc["components"]["responses"]
    out = [
        "# HTTP reference",
        "",
        "Generated when the docs are built from the OpenAPI 3.1 document a node serves at",
        "`GET /openapi.json` (`src/kiq/api/openapi.py`), here for the core API of a node",
        "that checks bearer tokens. A node's own document also holds its application's",
        "routes. What each answer means, and the headers of a lookup:",
        "[Endpoints](../guides/endpoints.md); who may call what: [Security](../security.md).",
        "",
        "**Access** (`x-kiq-access`): `open` needs no token; `token` any valid token; `read`,",
        "`write` and `admin` the scopes `kiq:read` (or `kiq:read:TABLE`), `kiq:write` and",
        "`kiq:admin`.",
        "",
        "| route | access | summary |",
        "|---|---|---|",
    ]
    ops = sorted(_operations(doc), key=lambda o: (o[0], o[1]))
    for path, method, op in ops:
        out.append(
            f"| [`{method} {path}`](#{op['operationId']}) | {op.get('x-kiq-access', '')} | "
            f"{_cell(op.get('summary', ''))} |"
        )
    out.append("")
    for path, method, op in ops:
        out += [f"## `{method} {path}` {{ #{op['operationId']} }}", ""]
        if op.get("summary"):
            out += [_cell(op["summary"]), ""]
        out += [f"Access: `{op.get('x-kiq-access', '')}`.", ""]
        params = op.get("parameters", [])
        if params:
            out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
            for p in params:
                out.append(
                    f"| `{p['name']}` | {p['in']} | {_cell(_schema_text(p.get('schema', {})))} | "
                    f"{'yes' if p.get('required') else ''} | {_cell(p.get('description', ''))} |"
                )
            out.append("")
        body = op.get("requestBody")
        if body:
            media, content = next(iter(body["content"].items()))
            out += [f"Body: `{media}`, {_cell(_schema_text(content.get('schema', {})))}.", ""]
        out += ["| status | answer |", "|---|---|"]
        for status, answer in sorted(op["responses"].items()):
            if "$ref" in answer:
                answer = responses[answer["$ref"].rsplit("/", 1)[-1]]
            out.append(f"| {status} | {_cell(answer.get('description', ''))} |")
        out.append("")
    return "\n".join(out)


# --- the mkdocs hook -------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site (mkdocs calls this once per build)."""
    from mkdocs.structure.files import File

    module = globals()
    for uri, maker in PAGES.items():
        files.append(File.generated(config, uri, content=module[maker]()))
    files.append(
        File.generated(
            config, "reference/openapi.json", content=json.dumps(openapi_document(), indent=2)
        )
    )
    files.append(File.generated(config, "changelog.md", content=changelog_markdown()))
    return files


def changelog_markdown(root: Path | None = None) -> str:
    """CHANGELOG.md as a page of the site: its links, relative to the repository's root,
    made relative to docs/ (``docs/security.md`` → ``security.md``); a link to a file
    outside docs/ becomes its text and the file's path."""
    base = root or Path(__file__).resolve().parents[1]
    text = (base / "CHANGELOG.md").read_text()
    return _LINK.sub(_from_docs, text)


_LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|#)([^)]+)\)")


def _from_docs(match: re.Match[str]) -> str:
    label, target = match.groups()
    if target.startswith("docs/"):
        return f"[{label}]({target[len('docs/') :]})"
    return f"{label} (`{target}`)"
