"""``stable(obj)``: a text that names a value the same way in every process (for cache keys).

Unlike ``repr`` it never prints a memory address: a function is named by its module, qualified name,
bytecode, constants and closure (recursively), so two processes that load the same code agree, and
editing a formula, a guard or a rule changes the text.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from types import CodeType, FunctionType


def stable(obj: object) -> str:
    if isinstance(obj, CodeType):
        return f"<code {obj.co_name} {hashlib.sha256(obj.co_code + stable(obj.co_consts).encode()).hexdigest()[:16]}>"
    if isinstance(obj, FunctionType):
        code = obj.__code__
        cells = tuple(c.cell_contents for c in obj.__closure__ or ())
        body = hashlib.sha256(code.co_code + stable(code.co_consts).encode() + stable(cells).encode()).hexdigest()
        return f"<fn {obj.__module__}.{obj.__qualname__} {body[:16]}>"
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = ", ".join(f"{f.name}={stable(getattr(obj, f.name))}" for f in dataclasses.fields(obj) if f.init)
        return f"{type(obj).__name__}({fields})"
    if isinstance(obj, Mapping):
        return "{" + ", ".join(f"{stable(k)}: {stable(v)}" for k, v in sorted(obj.items(), key=lambda kv: repr(kv[0]))) + "}"
    if isinstance(obj, (frozenset, set)):
        return "{" + ", ".join(sorted(stable(x) for x in obj)) + "}"
    if isinstance(obj, (list, tuple)):
        return "(" + ", ".join(stable(x) for x in obj) + ")"
    if callable(obj) and not isinstance(obj, type):
        return f"<callable {type(obj).__module__}.{type(obj).__qualname__}>"
    return repr(obj)
