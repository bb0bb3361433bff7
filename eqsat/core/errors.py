"""The optimizer's exceptions: bad input (the caller's to fix) versus internal failure (ours)."""


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
