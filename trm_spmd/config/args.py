"""`parse_arg`: the string after ':' in `--config=configs/x.py:ARG`.

ARG is a comma-separated list of `key=value` or bare words. A bare word that names a
spec key sets it to True (`runlocal`); any other bare word goes to the first spec key
(so `t3_n6` means `variant=t3_n6`). Values are parsed with the spec default's type.
"""

import difflib

import ml_collections

from trm_spmd.errors import UserError


class ConfigArgError(UserError):
    """A config argument (the ARG of FILE.py:ARG) that cannot be parsed."""


def _convert(key, text, default):
    kind = type(default)
    if kind is bool:
        if text.lower() in ('true', '1', 'yes'):
            return True
        if text.lower() in ('false', '0', 'no'):
            return False
        raise ConfigArgError(f'config argument {key}={text}: expected true or false')
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            raise ConfigArgError(f'config argument {key}={text}: expected {kind.__name__}') from None
    return text


def parse_arg(arg, **spec):
    """Parses ARG against `spec` (name=default); returns a ConfigDict of all spec keys."""
    if not spec:
        raise ConfigArgError('parse_arg needs at least one spec key')
    result = ml_collections.ConfigDict(dict(spec))
    first = next(iter(spec))
    for token in (arg or '').split(','):
        token = token.strip()
        if not token:
            continue
        key, sep, value = token.partition('=')
        key = key.strip()
        if not sep:
            if key in spec and isinstance(spec[key], bool):
                result[key] = True
                continue
            key, value = first, token
        if key not in spec:
            close = difflib.get_close_matches(key, list(spec), n=1)
            hint = f' (did you mean {close[0]!r}?)' if close else ''
            raise ConfigArgError(
                f'unknown config argument {key!r}{hint}; known: {", ".join(spec)}')
        result[key] = _convert(key, value.strip(), spec[key])
    return result
