"""Load YAML into a model and report a bad file as `file:line: field: reason`.

Every YAML file gpuchain reads (topologies, device plugin and GFD config, MIG layouts, scenarios,
ClusterPolicy files) goes through here, and its bytes through ``read_input_text``, so a user
always gets the same kind of answer: where, which field, what is wrong and what to do.

Beyond plain YAML, a file is refused when it

- repeats a key in one mapping (YAML says keys are unique; PyYAML silently keeps the last, so
  a config could say ``migStrategy`` twice and mean the second without anyone noticing);
- nests deeper than ``MAX_DEPTH`` or uses more than ``MAX_ALIASES`` aliases (the parser would
  recurse until Python's limit, or an alias bomb would expand without bound);
- is empty or ``null`` (a truncated ConfigMap must not silently become every default), unless the
  caller's format says an empty file means the defaults (``empty_ok``).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpuchain.common.inputfile import ConfigFileError, read_input_text

if TYPE_CHECKING:
    import yaml

__all__ = [
    "MAX_ALIASES",
    "MAX_DEPTH",
    "ConfigFileError",
    "load_shipped",
    "load_yaml_data",
    "load_yaml_file",
    "load_yaml_model",
    "validate_data",
]

M = TypeVar("M")

MAX_DEPTH = 64
"""Deepest nesting accepted: NVIDIA's configs and Kubernetes objects stay under 20."""
MAX_ALIASES = 256
"""Most aliases (``*name``) accepted in one document."""


def load_shipped(text: str) -> Any:
    """A data file shipped inside gpuchain (the XID table, the MIG catalog): trusted and checked by
    the tests, so parsed with libyaml's C loader where PyYAML has it, without the user-file checks
    below. The pure-Python loader takes some 70 ms for the XID table, which the device plugin
    reads before it can serve; the node agents read those files' data from ``gpu.shipped``."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def _loader_class() -> Any:
    """The loader class, made on first use: PyYAML (with libyaml, about 1 MiB) is imported only when
    a YAML text is read, never by a module that merely names ``ConfigFileError`` or validates data."""
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that bounds nesting and aliases and refuses duplicate keys, naming the line."""

        def __init__(self, text: str, source: str) -> None:
            super().__init__(text)
            self.source = source
            self._depth = 0
            self._aliases = 0

        def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            line = event.start_mark.line + 1 if event.start_mark else None
            if isinstance(event, yaml.AliasEvent):
                self._aliases += 1
                if self._aliases > MAX_ALIASES:
                    raise ConfigFileError(
                        self.source,
                        line=line,
                        field="",
                        reason=f"more than {MAX_ALIASES} aliases; write the values out",
                    )
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    raise ConfigFileError(
                        self.source,
                        line=line,
                        field="",
                        reason=f"nested more than {MAX_DEPTH} levels deep; no gpuchain input is, check the file",
                    )
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base constructor names it
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise ConfigFileError(
                        self.source,
                        line=line,
                        field=str(key),
                        reason=f"duplicate key (first at line {first}); keep only one",
                    )
                seen[key] = line
            return super().construct_mapping(node, deep)

    return Loader


def load_yaml_data(text: str, *, source: str = "<input>", empty_ok: bool = True) -> tuple[Any, yaml.Node | None]:
    """Parse one YAML document: (the data, its node tree for line numbers).

    Raises ConfigFileError for anything that is not one bounded document with unique keys, and for
    an empty or null document unless ``empty_ok`` (then the data is ``{}``).
    """
    import yaml

    try:
        loader = _loader_class()(text, source)
    except yaml.reader.ReaderError as exc:  # raised while reading the first chunk
        raise _unprintable(text, exc, source) from None
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.reader.ReaderError as exc:
        raise _unprintable(text, exc, source) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        context = f" ({exc.context})" if exc.context else ""
        raise ConfigFileError(
            source, line=line, field="", reason=f"not valid YAML: {exc.problem or exc}{context}"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(source, line=None, field="", reason=f"not valid YAML: {exc}") from None
    except (ValueError, RecursionError, OverflowError) as exc:
        if isinstance(exc, ConfigFileError):
            raise
        raise ConfigFileError(source, line=None, field="", reason=f"not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if data is None:
        if not empty_ok:
            raise ConfigFileError(
                source,
                line=1,
                field="",
                reason="the file is empty (or null); give the settings, or '{}' for every default",
            )
        data = {}
    return data, root


def _unprintable(text: str, exc: yaml.reader.ReaderError, source: str) -> ConfigFileError:
    """A control character YAML refuses, named with its line."""
    line = text.count("\n", 0, exc.position) + 1
    return ConfigFileError(
        source,
        line=line,
        field="",
        reason=f"contains the control character U+{exc.character:04X}; YAML files hold printable text only",
    )


def load_yaml_model(model: type[M], *, text: str, source: str = "<input>", empty_ok: bool = True) -> M:
    """Parse ``text`` as YAML and validate it as ``model``: a ``common.schema`` dataclass (the node
    agents' configs, no pydantic imported) or a pydantic model (the operator's, the simulator's).

    Raises ConfigFileError naming the line and dotted field of the first problem, with a count
    of any further problems so nothing is hidden. Text given in code may be empty (every
    default); a file may not (``load_yaml_file``).
    """
    data, root = load_yaml_data(text, source=source, empty_ok=empty_ok)
    return validate_data(model, data=data, source=source, root=root)


def validate_data(model: type[M], *, data: Any, source: str = "<input>", root: yaml.Node | None = None) -> M:
    """``data`` (parsed from ``source``, whose node tree ``root`` gives lines) validated as ``model``;
    raises ConfigFileError as ``load_yaml_model`` says."""
    if dataclasses.is_dataclass(model):
        from gpuchain.common.schema import SchemaError, validate

        try:
            return validate(model, data)
        except SchemaError as exc:
            raise _problems(source, root, exc.errors()) from None
    from pydantic import ValidationError

    try:
        return model.model_validate(data)  # type: ignore[attr-defined,no-any-return]
    except ValidationError as exc:
        raise _problems(source, root, exc.errors()) from None


def _problems(source: str, root: yaml.Node | None, errors: list[Any]) -> ConfigFileError:
    """The first problem, with a count of (and each of) the others, so nothing is hidden."""
    found = [_located(source, root, e) for e in errors]
    first, others = found[0], tuple(str(e) for e in found[1:])
    more = f" (and {len(others)} more problem{'s' if len(others) > 1 else ''})" if others else ""
    return ConfigFileError(first.source, line=first.line, field=first.field, reason=first.reason + more, others=others)


def _located(source: str, root: yaml.Node | None, error: Any) -> ConfigFileError:
    """One problem (pydantic's or ``common.schema``'s, the same shape) as `source:line: field: reason`."""
    loc = tuple(error["loc"])
    field = ".".join(str(p) for p in loc) or "(top level)"
    return ConfigFileError(source, line=_line_of(root, loc), field=field, reason=_reason(error))


def load_yaml_file(model: type[M], *, path: str | Path, empty_ok: bool = False) -> M:
    """Read ``path`` (``read_input_text``'s rules) and validate it; any problem is a ConfigFileError.

    An empty or null file is refused unless ``empty_ok``: the format must say so explicitly.
    """
    p = Path(path)
    return load_yaml_model(model, text=read_input_text(p), source=str(p), empty_ok=empty_ok)


def _reason(error: Any) -> str:
    msg = str(error["msg"])
    if error["type"] == "extra_forbidden":
        return "unknown field (check the spelling; unknown fields are rejected)"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if error["type"] not in ("missing",) and "input" in error and not isinstance(error["input"], dict | list):
        msg = f"{msg} (got {_short(error['input'])})"
    return msg


def _short(value: Any) -> str:
    """``repr`` of a bad value, cut so the error stays one readable line."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the deepest YAML node that ``loc`` reaches."""
    if node is None:
        return None
    import yaml  # loaded already: the node comes from it

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
