"""A bounded, never-failing repr of outside values for error messages.

Error texts name the value they refuse; a hostile value (an integer of thousands of digits,
a list nested thousands deep, a megabyte string) must not make the error itself fail or flood
a log.
"""

from __future__ import annotations

import reprlib

__all__ = ["brief"]

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = _REPR.maxset = 6
_MAX_INT_BITS = 512  # about 154 digits: longer integers are described, not written out


def brief(value: object) -> str:
    """``repr(value)``, cut to a readable size; never raises."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > _MAX_INT_BITS:
        digits = int(value.bit_length() * 0.30103) + 1
        return f"<{'-' if value < 0 else ''}integer of about {digits} digits>"
    try:
        return _REPR.repr(value)
    except (ValueError, RecursionError, TypeError):
        return f"<{type(value).__name__}>"
