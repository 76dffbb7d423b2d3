"""Tool specifications from the registry and the options each command declares on the command line.

One tool per command of ``veotrace.registry.commands()``, in its order. A tool's input schema is the
command's click parameters (as Typer builds them from the command's signature) as JSON Schema: its
arguments (input paths), and its options but for those the server decides itself (``SERVER_OWNED``:
the output format and file, pictures, terminal rows, progress) and those a server must not offer
(``REFUSED``: options that write files the assistant names, run a program, follow a file forever or
reach a Dask cluster). Each parameter keeps what ``calls`` needs to rebuild the command line.

A spec is plain JSON (the worker computes it where every command module is imported, and sends it).
"""

from __future__ import annotations

from typing import Any

#: Options the server sets itself on every call (``-f json -o FILE``; nothing drawn, no terminal).
SERVER_OWNED = frozenset({"fmt", "output", "rows", "no_progress", "plot", "plot_size"})
#: Options no tool offers: they write where the caller says (``--save-baseline``, ``--pairs-out``,
#: ``--junit``), run a program (``--on-fail``), follow a file until stopped (``--follow`` and its
#: companions), or start or reach a Dask cluster (``--engine``, ``--scheduler``, ``--workers``, ``--jobs``).
REFUSED = frozenset({
    "save_baseline", "pairs_out", "junit", "on_fail", "exit_on_fail",
    "follow", "until", "idle_timeout", "poll", "state",
    "engine", "jobs", "scheduler", "workers",
})
#: Options declared as text that name a file the command reads (checked against the roots like paths).
TEXT_PATHS = frozenset({"space"})
#: The file suffix of commands whose result is a file they must write (``--output`` required: the server
#: picks the file, in its pages folder, and returns its path); others' is ``.out``.
WRITES = {"view": ".html", "report": ".html", "convert": ".parquet"}
#: The arguments every tool takes besides its command's options (how much of the result to show).
CONTROLS: dict[str, dict[str, Any]] = {
    "full": {"type": "boolean", "default": False, "description": "The whole result (the command's --format json), not cut."},
    "select": {"type": "string", "description": "Only this part of the result, by key path: findings, findings.0.evidence."},
    "row_offset": {"type": "integer", "minimum": 0, "default": 0, "description": "First row shown of each long list (to page)."},
    "row_limit": {"type": "integer", "minimum": 1, "description": "Rows shown of each long list [default: 10, fewer for a long result]."},
}

#: What the diagnose tool's description starts with: it is where an assistant begins.
ENTRY_POINT = ("Start here: call this first on the user's trace files. It runs every analysis that applies and "
               "returns ranked findings on one time axis, each naming the command that shows more. ")


def _kinds(param) -> set[str]:
    """The names of the parameter type's classes (typer carries its own copy of click: names, not classes)."""
    return {c.__name__ for c in type(param.type).__mro__}


def _json_type(param) -> dict[str, Any]:
    """The JSON Schema of one value of a click parameter."""
    kind, names = param.type, _kinds(param)
    if getattr(kind, "choices", None):
        return {"type": "string", "enum": [str(getattr(c, "value", c)) for c in kind.choices]}
    if "BoolParamType" in names:
        return {"type": "boolean"}
    for name, json_type in (("IntParamType", "integer"), ("FloatParamType", "number")):
        if name in names:
            out: dict[str, Any] = {"type": json_type}
            if getattr(kind, "min", None) is not None:
                out["minimum"] = kind.min
            if getattr(kind, "max", None) is not None:
                out["maximum"] = kind.max
            return out
    if "Tuple" in names:
        return {"type": "array", "items": {"type": "string"}, "minItems": len(kind.types), "maxItems": len(kind.types)}
    return {"type": "string"}


def _names_a_path(kind) -> bool:
    return any(c.__name__.endswith("Path") for c in type(kind).__mro__)  # click's Path, typer's TyperPath


def _is_path(param) -> bool:
    """Whether the parameter's values name files or folders (checked against the roots)."""
    if param.name in TEXT_PATHS or _names_a_path(param.type):
        return True
    if "Tuple" in _kinds(param):  # correlate --baseline ADDRS0 EPE0
        return any(_names_a_path(t) for t in param.type.types)
    # the commands' PathsArg parses with path_or_url (a function: click shows it as FuncParamType)
    return getattr(getattr(param.type, "func", None), "__name__", "") == "path_or_url"


def _default(value: Any) -> Any:
    value = getattr(value, "value", value)
    return value if isinstance(value, (str, int, float, bool)) else None


def command_spec(name: str, command, description: str) -> dict[str, Any]:
    """The tool spec of one click command: name, description, input schema and how to rebuild its command line."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    params: list[dict[str, Any]] = []
    formats: list[str] = []
    writes = None
    for param in command.params:
        if param.name == "output" and param.required:
            writes = WRITES.get(name, ".out")
        if param.name == "fmt":
            formats = [str(getattr(c, "value", c)) for c in getattr(param.type, "choices", ())]
        if param.name in SERVER_OWNED or param.name in REFUSED or param.name in CONTROLS:
            continue
        is_argument = param.param_type_name == "argument"
        many = param.multiple or (is_argument and param.nargs == -1)
        one = _json_type(param)
        if not is_argument and getattr(param, "is_flag", False):
            one = {"type": "boolean"}
        schema = {"type": "array", "items": one} if many else dict(one)
        if many and is_argument and param.required:
            schema["minItems"] = 1
        help_text = getattr(param, "help", None) or ("the input files or folders" if is_argument else "")
        if _is_path(param):
            help_text += " (under the server's roots)"
        if help_text:
            schema["description"] = help_text
        default = _default(param.default)
        if default is not None and not many and default != "":
            schema["default"] = default
        properties[param.name] = schema
        if param.required:
            required.append(param.name)
        long = next((o for o in param.opts if o.startswith("--")), param.opts[0]) if not is_argument else None
        params.append({"name": param.name, "argument": is_argument, "flag": bool(getattr(param, "is_flag", False)),
                       "many": many, "option": long, "path": _is_path(param)})
    clash = set(properties) & set(CONTROLS)
    if clash:
        raise ValueError(f"{name}: options {sorted(clash)} clash with the tools' own arguments")
    properties.update(CONTROLS)
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    if name == "diagnose":
        description = ENTRY_POINT + description
    else:
        description += " (For a first look at a trace, call diagnose first.)"
    return {"name": name, "description": description, "inputSchema": schema, "params": params,
            "json": "json" in formats, "writes": writes}


def tool_specs() -> list[dict[str, Any]]:
    """One spec per registered command, in the registry's order (imports every command's CLI module)."""
    import importlib

    import typer.main

    from veotrace import registry

    for entry in registry.commands():
        importlib.import_module(entry.cli)
    from veotrace.cli.app import app

    group = typer.main.get_command(app)
    out = []
    for entry in registry.commands():
        command = group.commands.get(entry.command)
        if command is None:
            raise LookupError(f"command {entry.command!r} of the registry is not on the command line")
        text = (command.help or command.short_help or "").strip()
        out.append(command_spec(entry.command, command, text))
    return out
