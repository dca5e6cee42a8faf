"""Applying loaded values to a configuration: each field type-checked, with the file and field in the error.

Kept apart from :mod:`promem_fast.config`, which says what the fields are; this says how a mapping read from
YAML / TOML / JSON or ``--set`` becomes them.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any, Literal

from promem_fast.errors import ConfigError


def merge(obj: Any, data: dict[str, Any], source: str, roles: Sequence[str], prefix: str = "") -> Any:
    """A copy of dataclass ``obj`` with ``data`` applied, type-checked field by field; ``roles``: the names a
    ``roles`` mapping may use."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: {prefix.rstrip('.') or 'config'} must be a mapping")
    hints = typing.get_type_hints(type(obj))
    changes: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(obj)}
    for key, value in data.items():
        name = key.replace("-", "_")
        where = f"{prefix}{name}"
        if name not in names:
            raise ConfigError(f"{source}: unknown config field {where!r}{suggestion(name, names, prefix)}")
        current = getattr(obj, name)
        hint = hints[name]
        if dataclasses.is_dataclass(current):
            changes[name] = merge(current, value, source, roles, where + ".")
        elif name == "roles":
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: {where} must map role names to llm sections")
            merged = dict(current)
            for role, section in value.items():
                if role not in roles:
                    raise ConfigError(f"{source}: unknown role {role!r} in {where}; roles: {', '.join(roles)}")
                merged[role] = merge(merged.get(role, obj.llm), section, source, roles, f"{where}.{role}.")
            changes[name] = merged
        else:
            changes[name] = coerce(value, hint, where, source)
    return dataclasses.replace(obj, **changes)


def suggestion(name: str, names: set[str], prefix: str) -> str:
    """``; did you mean 'pipeline.tau_comp'?`` for the fields ``name`` is a part or a misspelling of, else ''."""
    import difflib

    near = sorted(n for n in names if name in n or n in name) or difflib.get_close_matches(name, sorted(names), 3, 0.6)
    if not near:
        return f"; the fields of {prefix.rstrip('.') or 'the config'} are: {', '.join(sorted(names))}"
    return "; did you mean " + " or ".join(repr(prefix + n) for n in near[:3]) + "?"


def coerce(value: Any, hint: Any, where: str, source: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{source}: {where} = {value!r}; choose one of: {', '.join(map(str, args))}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, where, source)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{source}: {where} has a bad value {value!r}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{source}: {where} must be a list")
        return tuple(value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {where} must be a mapping")
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{source}: {where} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{source}: {where} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{source}: {where} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{source}: {where} must be a string, got {value!r}")
        return value
    return value


def nondefault(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The entries of a loaded config (as nested dicts) that differ from ``defaults``, a section at a time
    (``roles`` whole), so that laying them on a profile keeps the profile's own values elsewhere."""
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(defaults.get(key), dict) and key != "roles":
            sub = {k: v for k, v in value.items() if defaults[key].get(k) != v}
            if sub:
                out[key] = sub
        elif defaults.get(key) != value:
            out[key] = value
    return out


SECRET_WORDS = frozenset({"token", "key", "secret", "password", "credential", "credentials", "apikey"})
"""Words of an engine argument's name (split at ``_``) that mark its value a secret (``hf_token``, ``api_key``);
``max_num_batched_tokens`` is not one."""
REDACTED = "[redacted]"


def redact_options(options: dict[str, Any]) -> dict[str, Any]:
    """Engine arguments (``llm.options``) with each secret's value replaced by :data:`REDACTED`: what a record,
    a manifest or a report may hold of them (a token changes no reply)."""
    return {k: REDACTED if SECRET_WORDS & set(k.lower().split("_")) else v for k, v in options.items()}


def without_secrets(value: Any) -> Any:
    """``value`` (a config as nested dicts) with every ``options`` mapping passed through :func:`redact_options`."""
    if isinstance(value, dict):
        return {k: redact_options(v) if k == "options" and isinstance(v, dict) else without_secrets(v)
                for k, v in value.items()}
    return value


def without_keys(value: Any, keys: frozenset[str]) -> Any:
    """``value`` (a config as nested dicts) without the fields named in ``keys``, at any depth."""
    if isinstance(value, dict):
        return {k: without_keys(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, (list, tuple)):
        return [without_keys(v, keys) for v in value]
    return value
