"""Load YAML into a pydantic model and report a bad file as `file:line: field: reason`.

Every file gpuchain reads (topologies, device plugin config, MIG layouts, scenarios) goes
through here, so a user always gets the same kind of answer: where, which field, what is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigFileError(ValueError):
    """A file that cannot be used. ``str()`` is one line: `source:line: field: reason`."""

    def __init__(self, source: str, line: int | None, field: str, reason: str) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.reason = reason
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {field}: {reason}" if field else f"{where}: {reason}")


def load_yaml_model(model: type[M], text: str, source: str = "<input>") -> M:
    """Parse ``text`` as YAML and validate it as ``model``.

    Raises ConfigFileError naming the line and dotted field of the first problem, with a count
    of any further problems so nothing is hidden.
    """
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigFileError(source, line, "", f"not valid YAML: {exc.problem or exc}") from None
    if data is None:
        data = {}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        loc = tuple(first["loc"])
        field = ".".join(str(p) for p in loc) or "(top level)"
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        raise ConfigFileError(source, _line_of(root, loc), field, _reason(first) + more) from None


def load_yaml_file(model: type[M], path: str | Path) -> M:
    """Read ``path`` and validate it; a missing or unreadable file is a ConfigFileError too."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigFileError(str(p), None, "", f"cannot read file: {exc.strerror or exc}") from None
    return load_yaml_model(model, text, str(p))


def _reason(error: Any) -> str:
    msg = str(error["msg"])
    if error["type"] == "extra_forbidden":
        return "unknown field (check the spelling; unknown fields are rejected)"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if error["type"] not in ("missing",) and "input" in error and not isinstance(error["input"], dict | list):
        msg = f"{msg} (got {error['input']!r})"
    return msg


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the deepest YAML node that ``loc`` reaches."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in loc:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if str(key.value) == str(part):
                    child = value
                    line = key.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
            line = child.start_mark.line + 1
        if child is None:
            break
        node = child
    return line
