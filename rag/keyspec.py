"""How a configuration key is declared, and the one validator of declared keys.

A declaration (:class:`Int`, :class:`Str`, :class:`Group`, ... or a :class:`Ref` to a named
:class:`Definitions` entry) gives the key's JSON schema (:meth:`Node.schema`) and its Python type
(:meth:`Node.py_type`, the field type of :mod:`rag.sections`). :func:`first_error` validates a
value against such a schema (jsonschema, Draft 7) and :func:`describe` makes the error the one line
of a :class:`~rag.errors.ConfigError`, for the whole config and a section file alike.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar, Union


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()  # a key without default: absent stays absent


# ------------------------------------------------------------------------------------ declarations
@dataclass(frozen=True, eq=False, kw_only=True)
class Node:
    """One declared key. ``default``: the value an absent key gets (none: it stays absent);
    ``nullable``: ``null`` is a value too; ``description``: what it means (the schema's words)."""

    PY: ClassVar[Any] = None  # the Python type of a value (a composite's: its _own_type)
    default: Any = NO_DEFAULT
    description: str | None = None
    nullable: bool = False

    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT

    def default_value(self) -> Any:
        """The default (a callable default, e.g. the registry's names, read now: a test or a
        plug-in may extend the registry after import)."""
        return self.default() if callable(self.default) else self.default

    def _own_schema(self) -> dict:
        raise NotImplementedError

    def _own_type(self) -> Any:
        return self.PY

    def schema(self) -> dict:
        """The key's JSON schema (Draft 7)."""
        own = self._own_schema()
        out = {"anyOf": [own, {"type": "null"}]} if self.nullable else dict(own)
        if self.has_default():
            out["default"] = copy.deepcopy(self.default_value())
        if self.description:
            out["description"] = self.description
        for last in ("properties", "required"):  # a group's keys after its default and description
            if last in out:
                out[last] = out.pop(last)
        return out

    def py_type(self) -> Any:
        """The Python type of the key's value in a typed section (lists are tuples, objects
        read-only mappings)."""
        own = self._own_type()
        return own | None if self.nullable else own

    def target(self) -> Node:
        """The declaration itself (a :class:`Ref`: the one it names)."""
        return self


def _set(**keywords) -> dict:
    """The schema keywords given a value (not None)."""
    return {k: v for k, v in keywords.items() if v is not None}


@dataclass(frozen=True, eq=False, kw_only=True)
class Num(Node):
    """A number (an integer is one too)."""

    PY: ClassVar[Any] = float
    JSON_TYPE: ClassVar[str] = "number"
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None

    def _own_schema(self) -> dict:
        return {"type": self.JSON_TYPE, **_set(minimum=self.minimum, maximum=self.maximum,
                                               exclusiveMinimum=self.exclusive_minimum,
                                               exclusiveMaximum=self.exclusive_maximum)}


@dataclass(frozen=True, eq=False, kw_only=True)
class Int(Num):
    PY: ClassVar[Any] = int
    JSON_TYPE: ClassVar[str] = "integer"


@dataclass(frozen=True, eq=False, kw_only=True)
class Str(Node):
    """A string; ``pattern``: a regular expression the whole value must match."""

    PY: ClassVar[Any] = str
    pattern: str | None = None

    def _own_schema(self) -> dict:
        return {"type": "string", **_set(pattern=self.pattern or None)}


@dataclass(frozen=True, eq=False, kw_only=True)
class Bool(Node):
    PY: ClassVar[Any] = bool

    def _own_schema(self) -> dict:
        return {"type": "boolean"}


@dataclass(frozen=True, eq=False)
class Enum(Node):
    """One of the strings ``values`` (a callable: read when the schema is built)."""

    PY: ClassVar[Any] = str
    values: tuple[str, ...] | Callable[[], Iterable[str]]

    def _own_schema(self) -> dict:
        return {"enum": list(self.values() if callable(self.values) else self.values)}


@dataclass(frozen=True, eq=False)
class List(Node):
    """A list of ``items``; ``min_items``, ``unique``: at least that many, no two equal."""

    items: Node
    min_items: int | None = None
    unique: bool = False

    def _own_schema(self) -> dict:
        return {"type": "array", **_set(minItems=self.min_items, uniqueItems=self.unique or None),
                "items": self.items.schema()}

    def _own_type(self) -> Any:
        return tuple[self.items.py_type(), ...]


@dataclass(frozen=True, eq=False)
class Map(Node):
    """An object of names chosen by the user: ``values`` (None: any), ``names`` (None: any
    string), ``min_items``: at least that many."""

    values: Node | None = None
    names: Node | None = None
    min_items: int | None = None

    def _own_schema(self) -> dict:
        return {"type": "object", **_set(minProperties=self.min_items,
                                         propertyNames=self.names.schema() if self.names else None,
                                         additionalProperties=self.values.schema() if self.values else None)}

    def _own_type(self) -> Any:
        return Mapping[str, self.values.py_type() if self.values is not None else Any]


@dataclass(frozen=True, eq=False)
class Group(Node):
    """A fixed set of keys (``keys``: name -> declaration, in the order a reader meets them); an
    unknown key is an error. Absent, a group is ``{}``: every key of it takes its default."""

    PY: ClassVar[Any] = Mapping[str, Any]
    keys: dict[str, Node]
    required: tuple[str, ...] = ()
    default: Any = field(default_factory=dict, kw_only=True)

    def _own_schema(self) -> dict:
        out: dict = {"type": "object", "additionalProperties": False,
                     "properties": {k: v.schema() for k, v in self.keys.items()}}
        if self.required:
            out["required"] = list(self.required)
        return out



@dataclass(frozen=True, eq=False)
class AnyOf(Node):
    """A value of one of ``alternatives``."""

    alternatives: tuple[Node, ...]

    def _own_schema(self) -> dict:
        return {"anyOf": [a.schema() for a in self.alternatives]}

    def _own_type(self) -> Any:
        return Union[tuple(a.py_type() for a in self.alternatives)]


@dataclass(frozen=True, eq=False)
class Ref(Node):
    """The named definition ``name`` of ``definitions`` (the schema's ``$ref``)."""

    name: str
    definitions: Definitions = field(repr=False)

    def _own_schema(self) -> dict:
        return {"$ref": f"#/definitions/{self.name}"}

    def _own_type(self) -> Any:
        return self.target().py_type()

    def target(self) -> Node:
        return self.definitions[self.name].target()


class Definitions(dict):
    """Named declarations a schema refers to (``#/definitions/<name>``): a type several keys share."""

    def define(self, name: str, node: Node) -> Definition:
        if name in self:
            raise ValueError(f"definition {name!r} declared twice")
        self[name] = node
        return Definition(name, self)

    def schema(self) -> dict:
        return {name: node.schema() for name, node in self.items()}


@dataclass(frozen=True, eq=False)
class Definition:
    name: str
    definitions: Definitions

    def ref(self, **options) -> Ref:
        """A key of this type (``default``, ``description``, ``nullable`` of its own)."""
        return Ref(self.name, self.definitions, **options)

    def node(self) -> Node:
        return self.definitions[self.name]


def at(root: Node, path: str) -> Node:
    """The declaration at the dotted ``path`` under ``root`` ("retriever.batch_size"; ``*`` stands
    for any name of a :class:`Map`: "tasks.*.source"), as written there (a :class:`Ref` stays one)."""
    node = root
    for part in path.split("."):
        parent = node.target()
        if isinstance(parent, Group) and part in parent.keys:
            node = parent.keys[part]
        elif isinstance(parent, Map) and part == "*" and parent.values is not None:
            node = parent.values
        else:
            raise KeyError(f"no config key {path!r} is declared (at {part!r})")
    return node


# ------------------------------------------------------------------------------------ validation
@lru_cache(maxsize=2)
def validator_class(fill_defaults: bool):
    """Draft 7, where a pattern must match the whole string; with ``fill_defaults`` an absent key
    that has a default gets it (a copy) and a boolean key given as the word true / false (any case:
    ``snakemake --config evaluate_in_train_job=false`` passes a string) becomes the boolean, in
    place, as the value is validated."""
    from jsonschema import Draft7Validator, ValidationError, validators

    def set_defaults(validator, properties, instance, sch):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
                word = instance.get(key)
                if isinstance(word, str) and isinstance(sub, dict) and sub.get("type") == "boolean":
                    instance[key] = {"true": True, "false": False}.get(word.lower(), word)
        yield from Draft7Validator.VALIDATORS["properties"](validator, properties, instance, sch)

    def full_pattern(validator, pattern, instance, sch):
        # the whole string must match: jsonschema's re.search lets "$" match before a trailing
        # newline ("nl\n" passed "^[a-z0-9_]+$"), and names and paths reach file names and commands
        if validator.is_type(instance, "string") and re.fullmatch(pattern, instance) is None:
            yield ValidationError(f"{instance!r:.80} does not match {pattern}")

    # an integer is an int: jsonschema also takes a float of integral value (2.0), which range(),
    # torch sizes and the sections' hashes would then meet as a float
    strict_integer = Draft7Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, instance: isinstance(instance, int) and not isinstance(instance, bool))
    extra = {"pattern": full_pattern, **({"properties": set_defaults} if fill_defaults else {})}
    return validators.extend(Draft7Validator, extra, type_checker=strict_integer)


def dotted(path, prefix: str = "") -> str:
    """The dotted key of a path of keys and list indices ("variants.1"), under ``prefix``."""
    parts = ([prefix] if prefix else []) + [str(p) for p in path]
    return ".".join(parts) if parts else "<top level>"


def _order(err) -> tuple:
    return len(list(err.absolute_path)), dotted(err.absolute_path)


def first_error(validator, instance):
    """The error to report of ``instance`` (the shallowest, then the first by key), or None."""
    errors = sorted(validator.iter_errors(instance), key=_order)
    return errors[0] if errors else None


_TYPE_NAMES = {"object": "an object", "array": "a list"}


def type_name(sch: dict, root: dict) -> str:
    """What a value of the schema ``sch`` is, in words ("integer", "a list of string", "an object")."""
    if "$ref" in sch:
        return type_name(root["definitions"][sch["$ref"].split("/")[-1]], root)
    if "anyOf" in sch:
        return " or ".join(type_name(a, root) for a in sch["anyOf"])
    if "enum" in sch:
        kinds = {type(v) for v in sch["enum"]}
        return "string" if kinds == {str} else "one of " + str(sch["enum"])
    kind = sch.get("type", "a value")
    if kind == "array" and "items" in sch:
        return f"a list of {type_name(sch['items'], root)}"
    return _TYPE_NAMES.get(kind, kind)


def _got(value: Any) -> str:
    whole = isinstance(value, float) and value.is_integer()
    return f"got {type(value).__name__} {value!r:.80}" + (f" (write {int(value)})" if whole else "")


def describe(err, root: dict, prefix: str = "") -> str:
    """One line naming the dotted key (under ``prefix``) and what is wrong with its value."""
    key = dotted(err.absolute_path, prefix)
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        where = f"{key}." if (err.absolute_path or prefix) else ""
        # repr keeps the message on one line whatever characters the key holds
        return f"unknown config key {where + str(extra[0])!r}" if extra else f"{key}: {err.message}"
    if err.validator == "required":
        missing = [k for k in err.validator_value if k not in err.instance]
        return f"config key '{dotted([*err.absolute_path, missing[0]], prefix)}' is missing"
    if err.validator == "propertyNames":
        return f"{key}: unknown name {err.instance!r} ({err.message})"
    if err.validator == "enum":
        return f"config key '{key}': {err.instance!r} is not one of {err.validator_value}"
    if err.validator == "type":
        return f"config key '{key}': expected {type_name(err.schema, root)}, {_got(err.instance)}"
    if err.validator == "anyOf":
        # the alternatives of the value's own type say what is wrong inside it; none: the types
        wrong_type = {e.relative_schema_path[0] for e in err.context
                      if e.validator == "type" and not e.relative_path}
        fitting = [i for i in range(len(err.validator_value)) if i not in wrong_type]
        if len(fitting) == 1:
            inner = sorted((e for e in err.context if e.relative_schema_path[0] == fitting[0]), key=_order)
            if inner:
                return describe(inner[0], root, prefix)
        if not fitting:
            return f"config key '{key}': expected {type_name(err.schema, root)}, {_got(err.instance)}"
    return f"config key '{key}': {err.message}"
