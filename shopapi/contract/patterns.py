"""The contract's `pattern`s read as ECMA-262 reads them (JSON Schema and OpenAPI say they are
ECMA-262 regular expressions), with Python's `re`: a pattern means to the server what it means to
a JavaScript client or linter. Why: docs/contract.md."""

import functools
import re

# ECMA-262's white space and line terminators: what its `\s` matches.
_SPACE = r"\t\n\v\f\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"

# Outside a character class, Python reads these otherwise: `$` (no multiline flag) is the very
# end, where Python's also matches before a final "\n"; `.` matches no line terminator, where
# Python's excludes "\n" only; `\s` and `\S` are spelled out (ASCII mode would narrow them).
_OUTSIDE = {
    "$": r"\Z",
    ".": r"[^\n\r\u2028\u2029]",
    r"\s": f"[{_SPACE}]",
    r"\S": f"[^{_SPACE}]",
    # An empty class matches nothing, `[^]` anything; Python would read their `]` as a literal.
    "[]": "(?!)",
    "[^]": r"[\s\S]",
}
_INSIDE = {r"\s": _SPACE, "[": r"\["}
_PIECE = re.compile(r"\\.|\[\^?\]?|.", re.DOTALL)


@functools.cache
def ecma_regex(pattern: str) -> re.Pattern:
    """`pattern` compiled so that `search` answers as ECMA-262's `RegExp.prototype.test` does.
    In ASCII mode, because ECMA-262's `\\d`, `\\w` and `\\b` are ASCII (Python's Unicode).
    Cached: the patterns are the contract's, a few dozen, each compiled once."""
    out, in_class = [], False
    for piece in _PIECE.findall(pattern):
        if not in_class:
            in_class = piece in ("[", "[^")
            out.append(_OUTSIDE.get(piece, piece))
        elif piece == r"\S":
            # "Not white space" within a class has no spelling among Python's classes.
            raise re.error(r"\S inside a character class is not supported", pattern)
        else:
            in_class = piece != "]"
            out.append(_INSIDE.get(piece, piece))
    return re.compile("".join(out), re.ASCII)
