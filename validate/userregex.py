"""Regular expressions a user wrote (log signatures, answer probes), run in linear time.

Python's ``re`` backtracks: a pattern such as ``(a+)+b`` takes exponential time on a long
line of ``a`` and would hang the log scan of a rollout. User patterns are compiled with
RE2 (``google-re2`` from PyPI), whose matching time is linear in the input whatever the
pattern; a pattern RE2 refuses (backreferences, look-around) is refused in the config, by
name, before any load. The built-in signatures (validate/signatures.py) are RE2-compatible
too and are compiled the same way when RE2 is installed.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

try:
    import re2 as _re2
except ImportError:  # an older serving image without google-re2: built-ins still scan, user patterns are refused
    _re2 = None


class Pattern(Protocol):
    pattern: str

    def search(self, text: str) -> Any: ...


class UserRegexError(ValueError):
    """A user pattern that cannot be run in linear time (or at all)."""


HAVE_RE2 = _re2 is not None


def _options() -> Any:
    assert _re2 is not None
    opts = _re2.Options()
    opts.log_errors = False  # the refusal is reported by name; RE2's own stderr line would only confuse
    return opts


def compile_user_regex(pattern: str) -> Pattern:
    """RE2-compiled ``pattern``; UserRegexError says why it cannot be used."""
    if _re2 is None:
        raise UserRegexError("needs google-re2 (a linear-time regex engine) installed where the gate runs")
    try:
        return _re2.compile(pattern, _options())
    except Exception as exc:  # re2's Error carries bytes: the message is what the user needs
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise UserRegexError(f"not a pattern RE2 accepts (no backreferences or look-around): {why}") from None


def compile_builtin(pattern: str) -> Pattern:
    """A built-in pattern: RE2 when installed, else Python's re (the built-ins do not backtrack badly)."""
    return _re2.compile(pattern, _options()) if _re2 is not None else re.compile(pattern)
