"""The base of the typed config (rag.config_keys): the model of a group of keys, the value types of its keys,
and the one line a validation error is.

A group of keys is a :class:`Key` model (pydantic: an unknown key is an error, the model frozen); a key's value
is one of the types here (:func:`Int`, :func:`Num`, :func:`Str`, :func:`Bool`, :func:`Enum`, :func:`List`,
:func:`Map`, :func:`Nullable`, :func:`Either`), each a pydantic type whose error says what was expected and how to
write it (``expected integer, got str '3' (write 3)``). :func:`validate` runs pydantic and makes its first error
(the shallowest, then the first by key) one :class:`~rag.errors.ConfigError` line naming the dotted key.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Callable, ClassVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError, core_schema

from rag.errors import ConfigError


def _no_default(schema: dict) -> None:
    schema.pop("default", None)


def absent(description: str | None = None) -> Any:
    """The default of a key without one: absent, it stays absent (None as an attribute)."""
    return Field(None, description=description, json_schema_extra=_no_default)


def has_default(field) -> bool:
    return field.json_schema_extra is not _no_default and not field.is_required()


class Key(BaseModel):
    """A group of keys, its fields the keys. Read with ``context={"whole": True}`` (a section file), every key with a
    default must be given but those of :meth:`may_lack`."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())
    optional: ClassVar[tuple[str, ...]] = ()  # keys with a default a section file may lack

    @classmethod
    def may_lack(cls, data: dict) -> tuple[str, ...]:
        return cls.optional

    @model_validator(mode="before")
    @classmethod
    def _whole(cls, data: Any, info) -> Any:
        if isinstance(data, dict) and info.context and info.context.get("whole"):
            lacking = [k for k, f in cls.model_fields.items() if k not in data and has_default(f) and not f.exclude
                       and k not in cls.may_lack(data)]
            if lacking:
                raise PydanticCustomError("config", "{line}", {"line": "is missing", "path": (lacking[0],), "missing": True})
        return data

    def to_dict(self) -> dict:
        """The mapping of the keys given (sorted), as a section file holds them."""
        return plain(self, full=False)


def plain(value: Any, full: bool = True) -> Any:
    """``value`` as plain data: a model's keys given and (``full``) those with a default, lists for tuples."""
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        out = {k: plain(getattr(value, k), full) for k, f in fields.items() if not f.exclude
               and (k in value.model_fields_set or (full and has_default(f)))}
        return out if full else dict(sorted(out.items()))
    if isinstance(value, (list, tuple)):
        return [plain(v, full) for v in value]
    if isinstance(value, dict):
        return {k: plain(v, full) for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------------ value types
class Bad(Exception):
    """A value's problem: ``message``, at ``path`` below the key; ``wrong_type``: the value is of another type."""

    def __init__(self, message: str, path: tuple = (), wrong_type: bool = False):
        super().__init__(message)
        self.message, self.path, self.wrong_type = message, path, wrong_type


# a number as YAML 1.2 and Python spell one; YAML 1.1 (PyYAML) reads one with an exponent but no dot (1e-4),
# or no sign after the e (1.0e4), as a string
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _got(value: Any, numeric: str | None = None) -> str:
    """"got <type> <value>", and how to write the value the key takes: an integral float as an integer, a string
    that spells a number as a number."""
    got = f"got {type(value).__name__} {value!r:.80}"
    if isinstance(value, float) and value.is_integer():
        return f"{got} (write {int(value)})"
    if not (isinstance(value, str) and numeric and _NUMBER.fullmatch(value)):
        return got
    number = Decimal(value)
    if numeric == "integer":
        return f"{got} (write {int(number)})" if number % 1 == 0 else got
    if "e" not in value.lower():
        return f"{got} (write {value} without quotes)"
    mantissa, _, exponent = value.lower().partition("e")
    yaml11 = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent if exponent[0] in '+-' else '+' + exponent}"
    return f"{got} (YAML reads {value} as a string: write {yaml11} or {number:f})"


class Leaf:
    """A key's value type: what it is in words (``expected``), its JSON schema (a callable: read when the schema is
    built), the check of a value (returning it, raising :class:`Bad`) and how a word of ``snakemake --config`` reads."""

    def __init__(self, expected: str, schema: dict | Callable, check: Callable, words: Callable | None = None,
                 numeric: str | None = None):
        self.expected, self.schema, self.check, self.numeric = expected, schema, check, numeric
        self.words = words or (lambda v: v)

    def wrong(self, value: Any, expected: str | None = None):
        raise Bad(f"expected {expected or self.expected}, {_got(value, self.numeric)}", wrong_type=True)

    def __get_pydantic_core_schema__(self, source, handler):
        def validate(value):
            try:
                return self.check(value)
            except Bad as bad:
                raise PydanticCustomError("config", "{line}", {"line": bad.message, "path": bad.path}) from None
        return core_schema.no_info_plain_validator_function(validate)

    def json_schema(self) -> dict:
        return self.schema() if callable(self.schema) else dict(self.schema)

    def __get_pydantic_json_schema__(self, _schema, _handler) -> dict:
        return self.json_schema()


def leaf(tp: Any) -> Leaf | None:
    """The :class:`Leaf` of a value type (``Annotated[..., Leaf]``), else None."""
    return next((m for m in get_args(tp)[1:] if isinstance(m, Leaf)), None) if get_origin(tp) is Annotated else None


def leaf_of(field) -> Leaf | None:
    """The :class:`Leaf` of a model's field, else None."""
    return next((m for m in field.metadata if isinstance(m, Leaf)), None)


def _typed(py: Any, lf: Leaf) -> Any:
    return Annotated[py, lf]


def _set(**kw) -> dict:
    return {k: v for k, v in kw.items() if v is not None}


def _bounds(v, ge=None, le=None, gt=None, lt=None) -> None:
    if ge is not None and v < ge:
        raise Bad(f"{v!r} is less than the minimum of {ge!r}")
    if le is not None and v > le:
        raise Bad(f"{v!r} is greater than the maximum of {le!r}")
    if gt is not None and v <= gt:
        raise Bad(f"{v!r} is less than or equal to the minimum of {gt!r}")
    if lt is not None and v >= lt:
        raise Bad(f"{v!r} is greater than or equal to the maximum of {lt!r}")


def _number_word(integer: bool) -> Callable:
    def read(v):
        if isinstance(v, str) and _NUMBER.fullmatch(v):
            return int(v) if re.fullmatch(r"[-+]?\d+", v) else v if integer else float(v)
        return v
    return read


def Int(ge: int | None = None, le: int | None = None) -> Any:
    """An integer (an int: not a bool, not an integral float, which range() and torch sizes would meet as one)."""
    def check(v):
        if not isinstance(v, int) or isinstance(v, bool):
            lf.wrong(v)
        _bounds(v, ge, le)
        return v
    lf = Leaf("integer", {"type": "integer", **_set(minimum=ge, maximum=le)}, check, _number_word(True), "integer")
    return _typed(int, lf)


def Num(ge=None, le=None, gt=None, lt=None) -> Any:
    """A number: an int stays one."""
    def check(v):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            lf.wrong(v)
        _bounds(v, ge, le, gt, lt)
        return v
    sch = {"type": "number", **_set(minimum=ge, maximum=le, exclusiveMinimum=gt, exclusiveMaximum=lt)}
    lf = Leaf("number", sch, check, _number_word(False), "number")
    return _typed(float, lf)


def Str(pattern: str | None = None) -> Any:
    """A string; ``pattern``: a regular expression the whole of it must match (names and paths reach file names and
    commands: "$" alone would let a trailing newline through)."""
    def check(v):
        if not isinstance(v, str):
            lf.wrong(v)
        if pattern and re.fullmatch(pattern, v) is None:
            raise Bad(f"{v!r:.80} does not match {pattern}")
        return v
    lf = Leaf("string", {"type": "string", **_set(pattern=pattern)}, check)
    return _typed(str, lf)


def Bool() -> Any:
    """A boolean; the words true and false (any case: ``--config evaluate_in_train_job=false`` passes a string) too."""
    def check(v):
        v = {"true": True, "false": False}.get(v.lower(), v) if isinstance(v, str) else v
        if not isinstance(v, bool):
            lf.wrong(v)
        return v
    lf = Leaf("boolean", {"type": "boolean"}, check)
    return _typed(bool, lf)


def Enum(values: tuple | Callable, renamed: dict[str, str] | None = None, description: str = "") -> Any:
    """One of the strings ``values`` (a callable: read at validation, the registry's names); ``renamed``: old name ->
    the value it is now, named in the error of a value given by its old name."""
    def names() -> list:
        return list(values() if callable(values) else values)

    def check(v):
        if isinstance(v, str) and v in (renamed or {}):
            raise Bad(f"{v!r} is renamed {renamed[v]!r}: write {renamed[v]}")
        if not isinstance(v, str) or v not in names():
            raise Bad(f"{v!r} is not one of {names()}")
        return v
    return _typed(str, Leaf("string", lambda: {"enum": names(), **_set(description=description or None)}, check))


def List(item: Any, min_items: int | None = None, max_items: int | None = None, unique: bool = False) -> Any:
    """A list of ``item`` values (a tuple as an attribute); ``min_items``, ``max_items``, ``unique``: at least, at
    most that many, no two equal."""
    inner = leaf(item)

    def check(v):
        if not isinstance(v, (list, tuple)):
            lf.wrong(v)
        out = []
        for i, x in enumerate(v):
            try:
                out.append(inner.check(x))
            except Bad as bad:
                raise Bad(bad.message, (i, *bad.path)) from None
        if min_items is not None and len(v) < min_items:
            raise Bad(f"{list(v)!r} should be non-empty" if min_items == 1 else f"{list(v)!r} is too short")
        if max_items is not None and len(v) > max_items:
            raise Bad(f"{list(v)!r} is too long")
        if unique and len({repr(x) for x in v}) < len(v):
            raise Bad(f"{list(v)!r} has non-unique elements")
        return tuple(out)

    def schema():
        return {"type": "array", **_set(minItems=min_items, maxItems=max_items, uniqueItems=unique or None),
                "items": inner.json_schema()}
    lf = Leaf(f"a list of {inner.expected}", schema, check, lambda v: [inner.words(x) for x in v] if isinstance(v, list) else v)
    return _typed(tuple, lf)


def Map(values: Any = None, names: Any = None, min_items: int | None = None) -> Any:
    """An object of names chosen by the user: ``values`` (None: any), ``names`` (None: any string)."""
    of, named = leaf(values) if values is not None else None, leaf(names) if names is not None else None

    def check(v):
        if not isinstance(v, dict):
            lf.wrong(v)
        out = {}
        for k, x in v.items():
            if named is not None:
                named.check(k)
            try:
                out[k] = of.check(x) if of is not None else x
            except Bad as bad:
                raise Bad(bad.message, (k, *bad.path)) from None
        if min_items is not None and len(v) < min_items:
            raise Bad(f"{v!r} should be non-empty")
        return out

    def schema():
        return {"type": "object", **_set(minProperties=min_items),
                **({"propertyNames": named.json_schema()} if named else {}),
                **({"additionalProperties": of.json_schema()} if of else {})}
    lf = Leaf("an object", schema, check, lambda v: {k: of.words(x) for k, x in v.items()} if of and isinstance(v, dict) else v)
    return _typed(dict, lf)


def Nullable(tp: Any) -> Any:
    """A value of ``tp`` or null."""
    inner = leaf(tp)

    def check(v):
        if v is None:
            return None
        try:
            return inner.check(v)
        except Bad as bad:
            if bad.wrong_type and not bad.path:
                lf.wrong(v)
            raise

    lf = Leaf(f"{inner.expected} or null", lambda: {"anyOf": [inner.json_schema(), {"type": "null"}]},
              check, lambda v: None if v == "null" else inner.words(v), inner.numeric)
    return _typed(Union[get_args(tp)[0], None], lf)


def Either(*alternatives: Any) -> Any:
    """A value of one of ``alternatives``: the error of the one of the value's own type, else what each is."""
    inner = [leaf(a) for a in alternatives]

    def check(v):
        errors = []
        for lf_ in inner:
            try:
                return lf_.check(v)
            except Bad as bad:
                errors.append(bad)
        fitting = [b for b in errors if not (b.wrong_type and not b.path)]
        if len(fitting) == 1:
            raise fitting[0]
        lf.wrong(v)

    lf = Leaf(" or ".join(i.expected for i in inner),
              lambda: {"anyOf": [i.json_schema() for i in inner]}, check)
    return _typed(Any, lf)


# ------------------------------------------------------------------------------------ errors and words
def dotted(path, prefix: str = "") -> str:
    """The dotted key of a path of keys and list indices ("variants.1"), under ``prefix``."""
    parts = ([prefix] if prefix else []) + [str(p) for p in path]
    return ".".join(parts) if parts else "<top level>"


def _where(err: dict) -> tuple[list, int]:
    """The path of a pydantic error (with a value type's own path below it) and its depth (an unknown or missing
    key's the group's: it is the group's problem)."""
    loc = [p for p in err["loc"] if p != "[key]"]
    ctx = err.get("ctx") or {}
    path = loc + list(ctx.get("path", ()))
    group_level = err["type"] in ("extra_forbidden", "missing") or ctx.get("missing")
    return path, len(path) - (1 if group_level else 0)


def line(err: dict, prefix: str = "") -> str:
    """One line naming the dotted key (under ``prefix``) and what is wrong with its value."""
    path, _ = _where(err)
    key, ctx = dotted(path, prefix), err.get("ctx") or {}
    if err["type"] == "extra_forbidden":
        return f"unknown config key {key!r}"
    if err["type"] == "missing" or ctx.get("missing"):
        return f"config key '{key}' is missing"
    if err["type"] == "config" and err["loc"] and err["loc"][-1] == "[key]":  # a name of a mapping
        return f"config key '{dotted(path[:-1], prefix)}': {ctx['line']}"
    if err["type"] == "config":
        return f"config key '{key}': {ctx['line']}"
    if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return f"config key '{key}': expected an object, {_got(err['input'])}"
    if err["type"] == "too_short":
        return f"config key '{key}': {err['input']!r} should be non-empty"
    return f"config key '{key}': {err['msg']}"


def validate(model: type[BaseModel], data: Any, prefix: str = "", where: str = "", whole: bool = False) -> Any:
    """``data`` validated as ``model``; its first error (the shallowest, then the first by key) a ConfigError:
    ``where`` (a file's ``"<path>: "``) and :func:`line`. ``whole``: a section file, every key given."""
    try:
        return model.model_validate(data, context={"whole": whole})
    except ValidationError as exc:
        first = min(exc.errors(), key=lambda e: (_where(e)[1], dotted(_where(e)[0])))
        raise ConfigError(where + line(first, prefix)) from None


def field_type(model: type[BaseModel], name: str) -> Any:
    """The type of key ``name`` of ``model``: its value type (``Annotated[..., Leaf]``), or its model or mapping."""
    f = model.model_fields[name]
    lf = leaf_of(f)
    return Annotated[f.annotation, lf] if lf else f.annotation


def read_words(value: Any, node: Any) -> Any:
    """``value`` of a key of type ``node`` (a model, a mapping of models, a value type) with its words read as the
    key declares them: a string that spells a number, of a number key, that number (an integer key: an integer's
    digits only); the word null of a nullable key None. Snakemake's ``--config`` reads the values inside a list or a
    mapping as strings (``seeds=[1,2]``: ``['1', '2']``)."""
    if isinstance(node, type) and issubclass(node, BaseModel):
        if not isinstance(value, dict):
            return value
        return {k: read_words(v, field_type(node, k)) if k in node.model_fields else v for k, v in value.items()}
    if get_origin(node) is dict:
        return {k: read_words(v, get_args(node)[1]) for k, v in value.items()} if isinstance(value, dict) else value
    lf = leaf(node)
    return lf.words(value) if lf is not None else value
