"""Typed settings from YAML: the one place where a mapping becomes a frozen dataclass, strictly.

Every settings block (a cell's ``split`` / ``train`` / ``score``, a sweep's ``run``, a plugin's
hyper-parameters) is a dataclass, and :func:`build` fills one from a mapping by its field annotations:
an unknown key is a one-line error with "did you mean", a value of the wrong type is a one-line error
naming the key and the type. Numbers are numbers however people write them: :func:`load_yaml` reads
``3e-4`` as a float (PyYAML follows YAML 1.1, which wants ``3.0e-4``, and returns the string '3e-4'),
and an int is accepted where a float is wanted; a bool is never taken for a number.

Example::

    build(TrainSettings, load_yaml("{lr: 3e-4, epochs: 2}"), "train")  # TrainSettings(epochs=2, lr=0.0003, ...)
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from typing import Any, Literal, Union

from .errors import PrivauditorError, unknown_name_message

# YAML 1.2's float forms that YAML 1.1 (PyYAML) leaves as strings: an exponent without a dot ("3e-4",
# "1E5"), next to PyYAML's own pattern
_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


@functools.cache
def _loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        """PyYAML's safe loader, with exponent floats written without a dot read as floats, and a key
        given twice in one mapping an error (PyYAML keeps the last one silently). A merge key (``<<: *base``)
        is not a key: the mapping's own keys override what it merges, as in PyYAML."""

        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, typing.Hashable):  # PyYAML's own error names it
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} is given twice", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

    Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
    return Loader


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that reads ``3e-4`` as the number it is (the same safe loader, one resolver more:
    no Python objects are ever constructed)."""
    loader = _loader()(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


@functools.cache
def _dumper() -> type:
    import yaml

    class Dumper(yaml.SafeDumper):
        """PyYAML's safe dumper, quoting the strings :func:`load_yaml` would read as numbers ("3074e23")."""

    Dumper.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeDumper.yaml_implicit_resolvers.items()}
    Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
    return Dumper


def dump_yaml(data: Any, **options: Any) -> str:
    """``yaml.safe_dump`` whose text :func:`load_yaml` reads back as ``data`` (a string that looks like an
    exponent float is quoted)."""
    import yaml

    return yaml.dump(data, Dumper=_dumper(), **options)


def read_yaml(path: Any) -> Any:
    """The YAML file ``path`` read by :func:`load_yaml`; malformed YAML (a key given twice, two documents,
    a tab) is a one-line error naming the file and the line."""
    import yaml

    try:
        return load_yaml(path.read_text())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(error, "problem", None) or error).split())
        raise PrivauditorError(f"{path}{where}: not valid YAML ({problem})") from None
    except UnicodeDecodeError:
        raise PrivauditorError(f"{path}: not valid UTF-8") from None


def build(cls: type, data: Any, where: str) -> Any:
    """An instance of the dataclass ``cls`` from the mapping ``data``, every field checked against its
    annotation (nested dataclasses recursively); ``where`` names the block in error messages."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PrivauditorError(f"{where} must be a mapping, not {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in data.items():
        if key not in fields:
            raise PrivauditorError(f"{where}: " + unknown_name_message("key", str(key), list(fields)))
        values[key] = check(value, hints[key], f"{where}.{key}")
    missing = [
        n for n, f in fields.items()
        if n not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]  # fmt: skip
    if missing:
        raise PrivauditorError(f"{where} needs {', '.join(missing)}")
    return cls(**values)


def check(value: Any, annotation: Any, where: str) -> Any:
    """``value`` as the type ``annotation`` asks for (an int for a float, a list for a tuple, a mapping
    for a dataclass), else a one-line :class:`PrivauditorError` naming ``where``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin in (Union, types.UnionType):
        return _check_union(value, args, where)
    if value is None:
        raise PrivauditorError(f"{where} must be {_name(annotation)}, not null")
    if origin is Literal:
        if value not in args:
            raise PrivauditorError(f"{where} must be one of {', '.join(map(str, args))}, not {value!r}")
        return value
    if dataclasses.is_dataclass(annotation):
        return value if isinstance(value, annotation) else build(annotation, value, where)
    if origin in (tuple, list):
        return _check_sequence(value, origin, args[0] if args else Any, where)
    if origin is dict:
        if not isinstance(value, dict):
            raise PrivauditorError(f"{where} must be a mapping, not {value!r}")
        inner = args[1] if len(args) == 2 else Any
        return {str(k): check(v, inner, f"{where}.{k}") for k, v in value.items()}
    return _check_scalar(value, annotation, where)


def _check_union(value: Any, args: tuple[Any, ...], where: str) -> Any:
    """The first option of ``X | Y | None`` that ``value`` passes (None only where None is an option)."""
    options = [a for a in args if a is not type(None)]
    if value is None:
        if len(options) < len(args):
            return None
        raise PrivauditorError(f"{where} must not be null")
    for option in options:
        try:
            return check(value, option, where)
        except PrivauditorError:
            continue
    names = " or ".join([_name(o) for o in options] + (["null"] if len(options) < len(args) else []))
    raise PrivauditorError(
        f"{where} must be {names}, not {value!r}{yaml_hint(value) if str in options else ''}"
    )


def _check_sequence(value: Any, origin: type, inner: Any, where: str) -> Any:
    """A tuple (or list, as annotated) of ``inner``; a lone string is a list of one (`attacks: loss`)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        raise PrivauditorError(f"{where} must be a list, not {value!r}")
    return origin(check(v, inner, f"{where}[{i}]") for i, v in enumerate(value))


def _check_scalar(value: Any, annotation: Any, where: str) -> Any:
    if annotation is float:
        if type(value) not in (int, float):
            raise PrivauditorError(f"{where} must be a number, not {value!r}")
        return float(value)
    if annotation in (int, bool, str) and type(value) is not annotation:
        raise PrivauditorError(
            f"{where} must be {_name(annotation)}, not {value!r}{yaml_hint(value) if annotation is str else ''}"
        )
    return value


def yaml_hint(value: Any) -> str:
    """Why YAML read ``value`` as it did where a name was meant: unquoted ``yes``/``no``/``on``/``off`` are
    booleans and ``2026-01-01`` a date (YAML 1.1); '' for any other value."""
    import datetime

    if isinstance(value, bool | datetime.date):
        return " (YAML reads unquoted yes, no, on, off, true, false and dates as such: quote the name)"
    return ""


def _name(annotation: Any) -> str:
    if annotation is float:
        return "a number"
    if typing.get_origin(annotation) in (tuple, list):
        return "a list"
    if typing.get_origin(annotation) is Literal:
        return " or ".join(map(str, typing.get_args(annotation)))
    if typing.get_origin(annotation) is dict or dataclasses.is_dataclass(annotation):
        return "a mapping"
    return getattr(annotation, "__name__", str(annotation))
