"""Naming a decoded JSON value in an error message without echoing it changed.

An error names the field and what was expected; it shows a client's string as sent,
but names a number only by its kind: the JSON parser may already have changed it (a
26-digit integer arrives as the nearest float, and printed back it would be a number
the client never sent).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["json_type", "shown"]

MAX_SHOWN = 100  # characters of a client's string repeated in an error


def json_type(value: Any) -> str:
    """What `value` is, in JSON's words: "a string", "an integer", "a number with a fraction" ..."""
    if value is None:
        return "null"
    if type(value) is bool:
        return "a boolean"
    if type(value) is int:
        return "an integer"
    if type(value) is float:
        return "a number with a fraction" if math.isfinite(value) and not value.is_integer() else "a number"
    if type(value) is str:
        return "a string"
    return "an array" if type(value) is list else "an object"


def shown(value: Any) -> str:
    """A string as sent (quoted, cut at MAX_SHOWN characters); anything else by its kind."""
    if type(value) is str:
        text = repr(value)
        return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."
    return json_type(value)
