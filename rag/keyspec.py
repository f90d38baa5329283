"""How a configuration key is declared, and the one validator of declared keys.

A declaration (:func:`Int`, :func:`Str`, :func:`Group`, ... or a :func:`ref` to a named
:func:`define` entry) is the key's JSON schema (Draft 7), a value of which may be a callable read when
the schema is built (:func:`resolve`: the registry's names); :func:`py_type` is its Python type (the
field type of :mod:`rag.sections`). :func:`validate` validates a value against such a schema, its error
the one line of a :class:`~rag.errors.ConfigError` (:func:`describe`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Union

from rag.errors import ConfigError


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()  # a key without default: absent stays absent
DEFINITIONS: dict[str, dict] = {}  # named declarations the schema refers to (#/definitions/<name>)


# ------------------------------------------------------------------------------------ declarations
def _key(own: dict, default: Any = NO_DEFAULT, description: str | None = None, nullable: bool = False) -> dict:
    """The schema of a key whose value has the schema ``own``; ``default``: the value an absent key
    gets (none: it stays absent); ``nullable``: ``null`` is a value too."""
    out = {"anyOf": [own, {"type": "null"}]} if nullable else dict(own)
    if default is not NO_DEFAULT:
        out["default"] = default
    if description:
        out["description"] = description
    for last in ("properties", "required"):  # a group's keys after its default and description
        if last in out:
            out[last] = out.pop(last)
    return out


def _set(**keywords) -> dict:
    """The schema keywords given a value (not None)."""
    return {k: v for k, v in keywords.items() if v is not None}


def Num(*, minimum=None, maximum=None, exclusive_minimum=None, exclusive_maximum=None, _type="number", **kw) -> dict:
    """A number (an integer is one too)."""
    return _key({"type": _type, **_set(minimum=minimum, maximum=maximum, exclusiveMinimum=exclusive_minimum,
                                       exclusiveMaximum=exclusive_maximum)}, **kw)


def Int(**kw) -> dict:
    return Num(_type="integer", **kw)


def Str(*, pattern: str | None = None, **kw) -> dict:
    """A string; ``pattern``: a regular expression the whole value must match."""
    return _key({"type": "string", **_set(pattern=pattern or None)}, **kw)


def Bool(**kw) -> dict:
    return _key({"type": "boolean"}, **kw)


def Enum(values, renamed: dict[str, str] | None = None, **kw) -> dict:
    """One of the strings ``values`` (a callable: read when the schema is built); ``renamed``: old name -> the
    value it is now, named in the error of a value given by its old name."""
    return _key({"enum": values if callable(values) else list(values), **({"x-renamed": renamed} if renamed else {})}, **kw)


def List(items: dict, min_items: int | None = None, unique: bool = False, **kw) -> dict:
    """A list of ``items``; ``min_items``, ``unique``: at least that many, no two equal."""
    return _key({"type": "array", **_set(minItems=min_items, uniqueItems=unique or None), "items": items}, **kw)


def Map(values: dict | None = None, names: dict | None = None, min_items: int | None = None, **kw) -> dict:
    """An object of names chosen by the user: ``values`` (None: any), ``names`` (None: any string),
    ``min_items``: at least that many."""
    return _key({"type": "object", **_set(minProperties=min_items, propertyNames=names,
                                          additionalProperties=values)}, **kw)


def Group(keys: dict[str, dict], required: tuple[str, ...] = (), default: Any = None, **kw) -> dict:
    """A fixed set of keys (``keys``: name -> declaration); an unknown key is an error. Absent, a
    group is ``{}``: every key of it takes its default."""
    own = {"type": "object", "additionalProperties": False, "properties": keys}
    if required:
        own["required"] = list(required)
    return _key(own, default={} if default is None else default, **kw)


def AnyOf(alternatives: tuple[dict, ...], **kw) -> dict:
    """A value of one of ``alternatives``."""
    return _key({"anyOf": list(alternatives)}, **kw)


def define(name: str, sch: dict) -> str:
    """Name the declaration ``sch`` (a type several keys share, :func:`ref`)."""
    if name in DEFINITIONS:
        raise ValueError(f"definition {name!r} declared twice")
    DEFINITIONS[name] = sch
    return name


def ref(name: str, **kw) -> dict:
    """A key of the named type ``name`` (``default``, ``description``, ``nullable`` of its own)."""
    return _key({"$ref": f"#/definitions/{name}"}, **kw)


def target(sch: dict) -> dict:
    """The declaration itself (a :func:`ref`: the one it names)."""
    return target(DEFINITIONS[sch["$ref"].split("/")[-1]]) if "$ref" in sch else sch


def resolve(value: Any) -> Any:
    """A copy of ``value`` with each callable in it replaced by what it returns (a test or a plug-in
    may extend the registry after import)."""
    if callable(value):
        value = value()
    if isinstance(value, dict):
        return {k: resolve(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # a callable's tuple of names: the schema's list
        return [resolve(v) for v in value]
    return copy.deepcopy(value)


_PY = {"integer": int, "number": float, "string": str, "boolean": bool, "null": type(None)}


def py_type(sch: dict) -> Any:
    """The Python type of a value of ``sch`` in a typed section (lists are tuples, objects read-only mappings)."""
    sch = target(sch)
    if "anyOf" in sch:
        return Union[tuple(py_type(a) for a in sch["anyOf"])]
    if "enum" in sch:
        return str
    if sch["type"] == "array":
        return tuple[py_type(sch["items"]), ...]
    if sch["type"] == "object":
        values = sch.get("additionalProperties")
        return Mapping[str, py_type(values) if isinstance(values, dict) else Any]
    return _PY[sch["type"]]


# a number as YAML 1.2 and Python spell one; YAML 1.1 (PyYAML) reads one with an exponent but no dot (1e-4),
# or no sign after the e (1.0e4), as a string
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def read_words(value: Any, sch: dict) -> Any:
    """``value`` of a key declared ``sch`` with its words read as the key declares them: a string that
    spells a number, of a number key, that number (an integer key: an integer's digits only); the word
    null of a nullable key None. Snakemake's ``--config`` reads the values inside a list or a mapping as
    strings (``seeds=[1,2]``: ``['1', '2']``)."""
    sch = target(sch)
    if "anyOf" in sch:
        for alternative in sch["anyOf"]:
            read = read_words(value, alternative)
            if read is not value:
                return read
        return value
    kind = sch.get("type")
    if isinstance(value, str):
        if kind in ("integer", "number") and _NUMBER.fullmatch(value):
            if re.fullmatch(r"[-+]?\d+", value):
                return int(value)
            return float(value) if kind == "number" else value
        return None if kind == "null" and value == "null" else value
    if isinstance(value, list) and kind == "array":
        return [read_words(v, sch["items"]) for v in value]
    if isinstance(value, dict) and kind == "object":
        keys, others = sch.get("properties", {}), sch.get("additionalProperties")
        return {k: read_words(v, keys[k]) if k in keys else read_words(v, others) if isinstance(others, dict) else v
                for k, v in value.items()}
    return value


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


def validate(validator, instance, prefix: str = "", where: str = "") -> None:
    """Validate ``instance``; its error to report (the shallowest, then the first by key) is a
    ConfigError: ``where`` (a file's ``"<path>: "``) and :func:`describe`'s line."""
    errors = sorted(validator.iter_errors(instance), key=_order)
    if errors:
        raise ConfigError(where + describe(errors[0], validator.schema, prefix))


_TYPE_NAMES = {"object": "an object", "array": "a list"}


def type_name(sch: dict, root: dict) -> str:
    """What a value of the schema ``sch`` is, in words ("integer", "a list of string", "an object")."""
    if "$ref" in sch:
        return type_name(root["definitions"][sch["$ref"].split("/")[-1]], root)
    if "anyOf" in sch:
        return " or ".join(type_name(a, root) for a in sch["anyOf"])
    if "enum" in sch:  # of strings (:func:`Enum`)
        return "string"
    kind = sch.get("type", "a value")
    if kind == "array" and "items" in sch:
        return f"a list of {type_name(sch['items'], root)}"
    return _TYPE_NAMES.get(kind, kind)


def _got(value: Any, expected: str | None = None) -> str:
    """"got <type> <value>", and how to write the value the key takes: an integral float as an
    integer, a string that spells a number as a number."""
    got = f"got {type(value).__name__} {value!r:.80}"
    if isinstance(value, float) and value.is_integer():
        return f"{got} (write {int(value)})"
    if not (isinstance(value, str) and expected in ("integer", "number") and _NUMBER.fullmatch(value)):
        return got
    from decimal import Decimal

    number = Decimal(value)
    if expected == "integer":
        return f"{got} (write {int(number)})" if number % 1 == 0 else got
    if "e" not in value.lower():
        return f"{got} (write {value} without quotes)"
    mantissa, _, exponent = value.lower().partition("e")
    plain = f"{number:f}"
    yaml11 = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent if exponent[0] in '+-' else '+' + exponent}"
    return f"{got} (YAML reads {value} as a string: write {yaml11} or {plain})"


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
    if err.validator == "enum" and isinstance(err.instance, str) and err.instance in err.schema.get("x-renamed", {}):
        new = err.schema["x-renamed"][err.instance]
        return f"config key '{key}': {err.instance!r} is renamed {new!r}: write {new}"
    if err.validator == "enum":
        return f"config key '{key}': {err.instance!r} is not one of {err.validator_value}"
    if err.validator == "anyOf":
        # the alternatives of the value's own type say what is wrong inside it; none: the types
        wrong_type = {e.relative_schema_path[0] for e in err.context
                      if e.validator == "type" and not e.relative_path}
        fitting = [i for i in range(len(err.validator_value)) if i not in wrong_type]
        inner = [e for e in err.context if len(fitting) == 1 and e.relative_schema_path[0] == fitting[0]]
        if inner:
            return describe(min(inner, key=_order), root, prefix)
    if err.validator == "type" or (err.validator == "anyOf" and not fitting):
        numeric = [a.get("type") for a in err.schema.get("anyOf", [err.schema]) if a.get("type") in ("integer", "number")]
        return f"config key '{key}': expected {type_name(err.schema, root)}, {_got(err.instance, next(iter(numeric), None))}"
    return f"config key '{key}': {err.message}"
