"""Frozen dataclasses validated from parsed YAML or JSON: the node agents' config models without pydantic.

The files a node agent reads (NVIDIA's device plugin config, mig-parted layouts, simulated
topologies) are small, flat and fixed in shape; a node agent importing pydantic for them pays
12.9 MiB of RSS per process and a tenth of a second at start. These models are plain
frozen dataclasses (``@define``) whose fields say, through ``spec(...)``, what pydantic's
``Field`` said (alias, bounds, validators); ``validate(cls, data)`` builds one from data and
``dump`` writes one back. Problems come out as pydantic's did, one dict per problem with ``loc``,
``type``, ``msg`` and ``input``, so ``common.yamlfile`` reports both the same way
(``file:line: field: reason``) and the messages users know stay word for word.

What a field accepts follows pydantic's lax mode for the types these models use: ``bool`` (true,
yes, on, 1 ... as words too), ``int`` (an integral number or its text), ``StrictInt`` (an int,
nothing else), ``float``, ``str``, enums and ``Literal`` (by value), ``X | None``, ``tuple[X, ...]``,
``list[X]``, ``tuple[X, Y]``, ``dict[K, V]``, nested models and ``Any``. Unknown keys are refused;
``None`` is only accepted where the type allows it. Per field, ``before`` sees the raw value
(and may replace it), ``check`` the validated one with the fields validated before it; a model's
``__post_init__`` checks the whole; a ``ValueError`` from any of them is the field's (or the
model's) problem. A model may define ``_before(cls, data)`` to rewrite its input first.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

T = TypeVar("T")

Loc = tuple[str | int, ...]


class _Strict:
    """The mark of a field that takes its type's own values and nothing else (no text, no 1 for true)."""


STRICT = _Strict()
StrictInt = Annotated[int, STRICT]
"""An int and nothing else (no bool, no text)."""
StrictBool = Annotated[bool, STRICT]
"""True or false and nothing else (no 1, no text)."""


class SchemaError(ValueError):
    """Data that does not fit a model: every problem found, pydantic's way (``errors()``)."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        self._errors = errors
        first = errors[0]
        super().__init__(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")

    def errors(self) -> list[dict[str, Any]]:
        return list(self._errors)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spec:
    """What a field's ``spec(...)`` said: see ``spec``."""

    key: str | None = None
    ge: float | None = None
    le: float | None = None
    min_length: int | None = None
    pattern: str | None = None
    before: Callable[[Any], Any] | None = None
    check: Callable[[Any, Mapping[str, Any]], Any] | None = None


def spec(
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    key: str | None = None,
    ge: float | None = None,
    le: float | None = None,
    min_length: int | None = None,
    pattern: str | None = None,
    before: Callable[[Any], Any] | None = None,
    check: Callable[[Any, Mapping[str, Any]], Any] | None = None,
) -> Any:
    """A model field: its default, the key it has in files (``key``, when not its name), bounds, validators."""
    meta = {"schema": Spec(key=key, ge=ge, le=le, min_length=min_length, pattern=pattern, before=before, check=check)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@typing.dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, spec))
def define(cls: type[T] | None = None, *, kw_only: bool = False) -> Any:
    """``@define``: a frozen dataclass whose fields may be ``spec(...)`` (type checkers know them)."""

    def make(c: type[T]) -> type[T]:
        return dataclasses.dataclass(frozen=True, kw_only=kw_only)(c)

    return make(cls) if cls is not None else make


def spec_of(f: dataclasses.Field[Any]) -> Spec:
    found = f.metadata.get("schema")
    return found if isinstance(found, Spec) else Spec()


def key_of(f: dataclasses.Field[Any]) -> str:
    """The field's key in files: ``spec(key=...)``, else its name."""
    return spec_of(f).key or f.name


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def is_model(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def validate(cls: type[T], data: Any) -> T:
    """``cls`` built from ``data``; raises SchemaError listing every problem."""
    errors: list[dict[str, Any]] = []
    value = _model(cls, data, (), errors)
    if errors:
        raise SchemaError(errors)
    return typing.cast(T, value)


def _error(errors: list[dict[str, Any]], loc: Loc, kind: str, msg: str, given: Any) -> None:
    errors.append({"loc": loc, "type": kind, "msg": msg, "input": given})


def _model(cls: type, data: Any, loc: Loc, errors: list[dict[str, Any]]) -> Any:
    if isinstance(data, cls):
        return data
    before = getattr(cls, "_before", None)
    if before is not None:
        data = before(data)
    if not isinstance(data, Mapping):
        _error(errors, loc, "model_type", f"Input should be a valid dictionary or instance of {cls.__name__}", data)
        return None
    fields = [f for f in dataclasses.fields(cls) if f.init]
    hints = _hints(cls)
    keys = {key_of(f) for f in fields} | {f.name for f in fields}
    values: dict[str, Any] = {}
    failed = len(errors)
    for f in fields:
        s = spec_of(f)
        key = key_of(f)
        given_key = key if key in data else f.name if f.name in data else None
        if given_key is None:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                _error(errors, (*loc, key), "missing", "Field required", data)
            continue
        here = (*loc, given_key)
        raw = data[given_key]
        before_count = len(errors)
        try:
            value = s.before(raw) if s.before is not None else raw
        except ValueError as exc:
            _error(errors, here, "value_error", f"Value error, {exc}", raw)
            continue
        value = _value(hints[f.name], value, here, errors, s)
        if len(errors) > before_count:
            continue
        if s.check is not None:
            try:
                value = s.check(value, values)
            except ValueError as exc:
                _error(errors, here, "value_error", f"Value error, {exc}", raw)
                continue
        values[f.name] = value
    for key in data:  # after the fields' own problems, as pydantic lists them
        if key not in keys:
            _error(errors, (*loc, key), "extra_forbidden", "Extra inputs are not permitted", data[key])
    if len(errors) > failed:
        return None
    try:
        built = cls(**values)
        after = getattr(built, "_after", None)
        if after is not None:
            after()
    except ValueError as exc:
        _error(errors, loc, "value_error", f"Value error, {exc}", data)
        return None
    return built


def _choices(values: list[Any]) -> str:
    shown = [repr(v.value if isinstance(v, enum.Enum) else v) for v in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def _value(tp: Any, v: Any, loc: Loc, errors: list[dict[str, Any]], s: Spec = Spec()) -> Any:
    """``v`` as type ``tp`` (pydantic's lax mode), bounds checked; None (and an error) when it is not."""
    origin = get_origin(tp)
    if tp is Any:
        return v
    if origin is Annotated:
        base, *marks = get_args(tp)
        if STRICT in marks:
            return _bounded(_strict(base, v, loc, errors), v, loc, errors, s)
        return _value(base, v, loc, errors, s)
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if v is None and type(None) in options:
            return None
        rest = [o for o in options if o is not type(None)]
        if len(rest) == 1:
            return _value(rest[0], v, loc, errors, s)
        failures: list[dict[str, Any]] = []
        for option in rest:
            trial: list[dict[str, Any]] = []
            found = _value(option, v, (*loc, _tag(option)), trial, s)
            if not trial:
                return found
            failures += trial
        errors.extend(failures)  # every member's problems, each under the member's name, as pydantic lists them
        return None
    if v is None:
        _error(errors, loc, "none_type", _none_message(tp), v)
        return None
    if origin is Literal:
        allowed = list(get_args(tp))
        if v in allowed:
            return v
        _error(errors, loc, "literal_error", f"Input should be {_choices(allowed)}", v)
        return None
    if origin in (tuple, list):
        return _sequence(tp, origin, v, loc, errors, s)
    if origin is dict:
        key_type, value_type = get_args(tp)
        if not isinstance(v, Mapping):
            _error(errors, loc, "dict_type", "Input should be a valid dictionary", v)
            return None
        out = {}
        for k, item in v.items():
            out[_value(key_type, k, (*loc, k), errors)] = _value(value_type, item, (*loc, k), errors)
        return out
    if is_model(tp):
        return _model(tp, v, loc, errors)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if v == member.value or v is member:
                return member
        _error(errors, loc, "enum", f"Input should be {_choices(list(tp))}", v)
        return None
    return _bounded(_scalar(tp, v, loc, errors), v, loc, errors, s)


def _tag(tp: Any) -> str:
    """How pydantic names a member of a union in an error's location (``literal['all']``, ``list[int]``)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return f"literal[{','.join(repr(a) for a in args)}]"
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{','.join('...' if a is Ellipsis else _tag(a) for a in args)}]"
    if origin is Annotated:
        return _tag(args[0])
    return str(getattr(tp, "__name__", tp))


def _none_message(tp: Any) -> str:
    if get_origin(tp) is Annotated:
        return _none_message(get_args(tp)[0])
    names = {bool: "a valid boolean", int: "a valid integer", float: "a valid number"}
    if tp in names:
        return f"Input should be {names[tp]}"
    if tp is str:
        return "Input should be a valid string"
    if get_origin(tp) in (tuple, list):
        return f"Input should be a valid {get_origin(tp).__name__}"
    if get_origin(tp) is dict:
        return "Input should be a valid dictionary"
    if is_model(tp):
        return f"Input should be a valid dictionary or instance of {tp.__name__}"
    return "Input should not be None"


def _sequence(tp: Any, origin: type, v: Any, loc: Loc, errors: list[dict[str, Any]], s: Spec) -> Any:
    if not isinstance(v, list | tuple):
        _error(errors, loc, f"{origin.__name__}_type", f"Input should be a valid {origin.__name__}", v)
        return None
    args = get_args(tp)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(v) > len(args):
            msg = f"Tuple should have at most {len(args)} items after validation, not {len(v)}"
            _error(errors, loc, "too_long", msg, v)
            return None
        if len(v) < len(args):
            for i in range(len(v), len(args)):
                _error(errors, (*loc, i), "missing", "Field required", v)
            return None
        return tuple(_value(a, item, (*loc, i), errors) for i, (a, item) in enumerate(zip(args, v, strict=True)))
    item_type = args[0] if args else Any
    items = [_value(item_type, item, (*loc, i), errors) for i, item in enumerate(v)]
    if s.min_length is not None and len(items) < s.min_length:
        noun = "item" if s.min_length == 1 else "items"
        what = "List" if origin is list else "Tuple"
        msg = f"{what} should have at least {s.min_length} {noun} after validation, not {len(items)}"
        _error(errors, loc, "too_short", msg, v)
        return None
    return tuple(items) if origin is tuple else items


def _strict(tp: Any, v: Any, loc: Loc, errors: list[dict[str, Any]]) -> Any:
    """``v`` if it is a ``tp`` itself (a bool is no int here)."""
    if isinstance(v, tp) and (tp is bool or not isinstance(v, bool)):
        return v
    names = {bool: "a valid boolean", int: "a valid integer"}
    _error(errors, loc, f"{tp.__name__}_type", f"Input should be {names.get(tp, tp.__name__)}", v)
    return None


def _scalar(tp: Any, v: Any, loc: Loc, errors: list[dict[str, Any]]) -> Any:
    if tp is bool:
        if isinstance(v, bool):
            return v
        if isinstance(v, int | float):
            if v in (0, 1):
                return bool(v)
            _error(errors, loc, "bool_parsing", "Input should be a valid boolean, unable to interpret input", v)
            return None
        if isinstance(v, str):
            word = v.strip().lower()
            if word in _TRUE or word in _FALSE:
                return word in _TRUE
            _error(errors, loc, "bool_parsing", "Input should be a valid boolean, unable to interpret input", v)
            return None
        _error(errors, loc, "bool_type", "Input should be a valid boolean", v)
        return None
    if tp is int:
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            if v.is_integer():
                return int(v)
            msg = "Input should be a valid integer, got a number with a fractional part"
            _error(errors, loc, "int_from_float", msg, v)
            return None
        if isinstance(v, str):
            try:
                return int(v.strip())
            except ValueError:
                msg = "Input should be a valid integer, unable to parse string as an integer"
                _error(errors, loc, "int_parsing", msg, v)
                return None
        _error(errors, loc, "int_type", "Input should be a valid integer", v)
        return None
    if tp is float:
        if isinstance(v, int | float):
            return float(v)
        if isinstance(v, str):
            try:
                return float(v.strip())
            except ValueError:
                msg = "Input should be a valid number, unable to parse string as a number"
                _error(errors, loc, "float_parsing", msg, v)
                return None
        _error(errors, loc, "float_type", "Input should be a valid number", v)
        return None
    if tp is str:
        if isinstance(v, str):
            return v
        _error(errors, loc, "string_type", "Input should be a valid string", v)
        return None
    if isinstance(tp, type) and isinstance(v, tp):
        return v
    _error(errors, loc, "is_instance_of", f"Input should be an instance of {getattr(tp, '__name__', tp)}", v)
    return None


def _bounded(v: Any, given: Any, loc: Loc, errors: list[dict[str, Any]], s: Spec) -> Any:
    """``v`` (validated from ``given``) within the field's bounds; the errors show what was given."""
    if v is None:
        return None
    if s.ge is not None and v < s.ge:
        _error(errors, loc, "greater_than_equal", f"Input should be greater than or equal to {_num(s.ge)}", given)
        return None
    if s.le is not None and v > s.le:
        _error(errors, loc, "less_than_equal", f"Input should be less than or equal to {_num(s.le)}", given)
        return None
    if s.pattern is not None and isinstance(v, str) and not re.search(s.pattern, v):
        _error(errors, loc, "string_pattern_mismatch", f"String should match pattern '{s.pattern}'", given)
        return None
    return v


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def dump(obj: Any, *, exclude_none: bool = False, exclude_defaults: bool = False) -> Any:
    """``obj`` as plain data by the files' keys: enums by value, tuples as lists, models as dicts."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            if not f.init:
                continue
            value = getattr(obj, f.name)
            if exclude_none and value is None:
                continue
            if exclude_defaults and _is_default(f, value):
                continue
            out[key_of(f)] = dump(value, exclude_none=exclude_none, exclude_defaults=exclude_defaults)
        return out
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, list | tuple):
        return [dump(v, exclude_none=exclude_none, exclude_defaults=exclude_defaults) for v in obj]
    if isinstance(obj, Mapping):
        return {k: dump(v, exclude_none=exclude_none, exclude_defaults=exclude_defaults) for k, v in obj.items()}
    return obj


def _is_default(f: dataclasses.Field[Any], value: Any) -> bool:
    if f.default is not dataclasses.MISSING:
        return bool(value == f.default)
    if f.default_factory is not dataclasses.MISSING:
        return bool(value == f.default_factory())
    return False


def field_types(cls: type) -> dict[str, Any]:
    """Each field's type by its key in files."""
    hints = _hints(cls)
    return {key_of(f): hints[f.name] for f in dataclasses.fields(cls) if f.init}
