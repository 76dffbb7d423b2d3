"""A tool call: its arguments checked and turned into the command's command line, and its result cut to size.

The rules a call meets before anything runs (``command_line``):

- only the tool's own arguments (an unknown one is refused, naming the ones there are), of their types;
- every path resolves (symbolic links followed) under one of the server's roots;
- no URL unless the server allows remote inputs (``file://`` URLs are paths, under the roots too);
- the options are written ``--name=value`` and the paths after ``--``, so no value is read as an option.

Everything else the command checks itself, as on the command line, and its ``Error:`` line is the tool's
error. The result (the command's JSON) is cut by ``cut``: every list shows ``row_limit`` rows from
``row_offset`` (fewer when the whole is longer than an assistant's reading budget), and says what it left out.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from veotrace.defaults import MCP_FOLDER_ENTRIES as FOLDER_ENTRIES
from veotrace.defaults import MCP_MAX_CHARS, MCP_ROW_LIMIT
from veotrace.errors import UsageError


class ToolError(Exception):
    """A call refused before or while it ran: the message is the tool's error text (one line)."""


@dataclass(frozen=True)
class Policy:
    """What the server lets a call read: its roots (resolved folders) and whether URLs are allowed."""

    roots: tuple[Path, ...]
    allow_remote: bool = False

    @classmethod
    def of(cls, roots: list[str | Path] | None = None, allow_remote: bool = False) -> Policy:
        folders = [Path(os.path.realpath(os.path.expanduser(str(r)))) for r in (roots or [os.getcwd()])]
        for folder in folders:
            if not folder.is_dir():
                raise UsageError(f"--root {folder}: not a folder; give a folder whose files the server may read")
        return cls(tuple(folders), allow_remote)

    def check_path(self, text: str) -> None:
        """Refuse ``text`` unless it is under a root (or a URL the server allows)."""
        shown = text
        if "://" in text:
            url = urlsplit(text)
            if url.scheme.lower() == "file":
                if url.netloc not in ("", "localhost"):
                    raise ToolError(f"{shown}: a file URL names a file on this machine (file:///path)")
                text = unquote(url.path)
            elif not self.allow_remote:
                raise ToolError(f"{shown}: the server reads no URL (start it with --allow-remote to allow them)")
            else:
                return
        if "\0" in text:
            raise ToolError(f"{shown!r}: a path has no NUL character")
        resolved = Path(os.path.realpath(os.path.expanduser(text)))
        if not self._inside(resolved):
            raise ToolError(f"{shown}: outside the folders this server reads ({self._shown()}); "
                            "restart it with --root for that folder, or copy the file under one")
        if resolved.is_dir():  # a folder of logs: no link in it may lead out either
            for n, entry in enumerate(resolved.rglob("*")):
                if n >= FOLDER_ENTRIES:
                    raise ToolError(f"{shown}: more than {FOLDER_ENTRIES:,} entries to check; name the files, or a smaller folder")
                if entry.is_symlink() and not self._inside(Path(os.path.realpath(entry))):
                    raise ToolError(f"{entry}: a link to outside the folders this server reads ({self._shown()})")

    def _inside(self, resolved: Path) -> bool:
        return any(resolved == root or resolved.is_relative_to(root) for root in self.roots)

    def _shown(self) -> str:
        return ", ".join(str(r) for r in self.roots)


@dataclass
class Call:
    """A checked call: the command line to run and how to show its result."""

    argv: list[str]
    full: bool = False
    select: str | None = None
    row_offset: int = 0
    row_limit: int | None = None


_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list}


def _check_value(tool: str, key: str, schema: dict[str, Any], value: Any) -> None:
    kind = schema.get("type")
    expected = _TYPES.get(kind)
    wrong = expected is not None and not isinstance(value, expected)
    if kind in ("integer", "number") and isinstance(value, bool):
        wrong = True
    if wrong:
        raise ToolError(f"{tool}: {key} must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got {json.dumps(value)}")
    if kind == "array":
        for item in value:
            _check_value(tool, key, schema.get("items", {}), item)
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            raise ToolError(f"{tool}: {key} takes {schema.get('minItems')} to {schema.get('maxItems', 'any number of')} values")
    if "enum" in schema and value not in schema["enum"]:
        raise ToolError(f"{tool}: {key} must be one of {', '.join(schema['enum'])}, got {json.dumps(value)}")
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        raise ToolError(f"{tool}: {key} must be at least {schema['minimum']}, got {value}")


def command_line(spec: dict[str, Any], arguments: dict[str, Any] | None, policy: Policy) -> Call:
    """The checked call of tool ``spec`` with ``arguments``.

    Raises:
        ToolError: an unknown argument, a value of the wrong type, a missing one, a path outside the roots
            or a URL the server does not allow.
    """
    tool = spec["name"]
    arguments = dict(arguments or {})
    properties = spec["inputSchema"]["properties"]
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        raise ToolError(f"{tool}: no option {', '.join(unknown)}; its options are {', '.join(properties)}")
    for key in spec["inputSchema"].get("required", []):
        if arguments.get(key) in (None, []):
            raise ToolError(f"{tool}: {key} is required")
    for key, value in arguments.items():
        if isinstance(value, str) and properties[key].get("type") == "array" and "maxItems" not in properties[key]:
            arguments[key] = value = [value]  # one path given as a string, as assistants often do
        if value is not None:
            _check_value(tool, key, properties[key], value)
    options: list[str] = []
    positional: list[str] = []
    for param in spec["params"]:
        value = arguments.get(param["name"])
        if value is None or value is False or value == []:
            continue
        values = [value] if not param["many"] and not isinstance(value, list) else list(value)
        if param["path"]:
            for v in values:
                policy.check_path(str(v))
        if param["argument"]:
            positional += [str(v) for v in values]
        elif param["flag"]:
            options.append(param["option"])
        elif isinstance(value, list) and not param["many"]:  # a pair (correlate --baseline A B)
            options += [param["option"], *[str(v) for v in value]]
        else:
            options += [f"{param['option']}={_text(v)}" for v in values]
    argv = [tool, *options]
    if positional:
        argv += ["--", *positional]
    return Call(argv, full=bool(arguments.get("full")), select=arguments.get("select"),
                row_offset=int(arguments.get("row_offset") or 0), row_limit=arguments.get("row_limit"))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def pick(result: Any, select: str | None) -> Any:
    """The part of ``result`` at key path ``select`` ("findings.0.evidence")."""
    if not select:
        return result
    node = result
    for key in select.split("."):
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.lstrip("-").isdigit() and -len(node) <= int(key) < len(node):
            node = node[int(key)]
        else:
            have = ", ".join(map(str, node)) if isinstance(node, dict) else f"0..{len(node) - 1}" if isinstance(node, list) else "nothing"
            raise ToolError(f"select {select!r}: no {key!r} here (there is {have})")
    return node


def _cut(node: Any, offset: int, limit: int, where: str, left: list[dict[str, Any]], depth: int = 0) -> Any:
    if isinstance(node, dict):
        return {k: _cut(v, offset, limit, f"{where}.{k}" if where else str(k), left, depth + 1) for k, v in node.items()}
    if isinstance(node, list):
        start = offset if depth <= 1 else 0  # the result's own lists page; lists inside a row show their first rows
        shown = node[start:start + limit]
        if len(node) > len(shown):
            left.append({"list": where or "(the result)", "rows": len(node), "shown": [start, start + len(shown)]})
        return [_cut(v, offset, limit, f"{where}.{start + i}", left, depth + 1) for i, v in enumerate(shown)]
    if isinstance(node, str) and len(node) > 2000:
        left.append({"text": where, "chars": len(node), "shown": 2000})
        return node[:2000] + "..."
    return node


def cut(result: Any, *, offset: int = 0, limit: int | None = None, budget: int = MCP_MAX_CHARS) -> tuple[Any, list[dict[str, Any]]]:
    """``result`` with every list cut to ``limit`` rows from ``offset``, and what was left out.

    With no ``limit`` given, the rows per list shrink from ``MCP_ROW_LIMIT`` until the JSON fits ``budget``
    characters (a given ``limit`` is kept as asked).
    """
    tries = [limit] if limit is not None else [MCP_ROW_LIMIT, 5, 3, 1]
    for rows in tries:
        left: list[dict[str, Any]] = []
        shown = _cut(result, offset, rows, "", left)
        if len(json.dumps(shown, default=str)) <= budget:
            break
    return shown, left
