"""The optimizer's exceptions: bad input (the caller's to fix) versus internal failure (ours), and an
egglog panic made an internal failure."""

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class EqSatInputError(ValueError):
    """The input is not something the optimizer can work on; the message says what to do."""


class EqSatInternalError(RuntimeError):
    """A stage failed; inside a compiler pass this leaves the graph untouched (strict mode raises)."""

    def __init__(self, stage: str, cause: BaseException | str) -> None:
        self.stage = stage
        self.cause = cause
        super().__init__(f"{stage} failed: {cause}")


class BudgetExceeded(EqSatInternalError):
    """A wall-clock budget ran out in a stage that cannot stop early with a usable result."""


class EnginePanic(RuntimeError):
    """egglog panicked (a Rust panic inside the e-graph, made an ordinary exception by ``guarded``)."""


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust panic pyo3 raised: ``pyo3_runtime.PanicException``, a ``BaseException``
    that a compiler's ``except Exception`` lets through."""
    kind = type(exc)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


def described(exc: BaseException) -> str:
    """``Type: message``: what a failure is logged as. A string, never the exception: a log handler that
    keeps records (pytest's) would keep its frames, and through them an engine's e-graph, which must be
    let go on the thread that made it."""
    return f"{type(exc).__name__}: {exc}"


def guarded(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``, a panic raised as :class:`EnginePanic`."""
    try:
        return fn(*args)
    except Exception:
        raise
    except BaseException as exc:
        if is_panic(exc):
            raise EnginePanic(f"egglog panicked: {exc}") from exc
        raise
