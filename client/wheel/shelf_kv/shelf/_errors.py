"""Status codes, shelf.Status and the shelf.Error classes: the same names,
bases and attributes as the system module's (docs/client.md, "Python")."""

import enum

from . import _native


class StatusCode(enum.IntEnum):
    """Status codes (the canonical gRPC / Abseil codes)."""
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


def _code_name(code):
    try:
        return StatusCode(code).name
    except ValueError:
        return "UNKNOWN"


class Error(Exception):
    """A failed Shelf call: .code (int), .code_name and .message."""


def _error_class(name, builtin):
    bases = (Error, builtin) if builtin is not None else (Error,)
    return type(name, bases, {"__module__": "shelf"})


NotFoundError = _error_class("NotFoundError", KeyError)
InvalidArgumentError = _error_class("InvalidArgumentError", ValueError)
OutOfRangeError = _error_class("OutOfRangeError", ValueError)
DeadlineExceededError = _error_class("DeadlineExceededError", TimeoutError)
UnavailableError = _error_class("UnavailableError", ConnectionError)
FailedPreconditionError = _error_class("FailedPreconditionError", None)
ResourceExhaustedError = _error_class("ResourceExhaustedError", None)
DataLossError = _error_class("DataLossError", None)
UnimplementedError = _error_class("UnimplementedError", NotImplementedError)
UnauthenticatedError = _error_class("UnauthenticatedError", PermissionError)
PermissionDeniedError = _error_class("PermissionDeniedError", PermissionError)

_BY_CODE = {
    StatusCode.NOT_FOUND: NotFoundError,
    StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    StatusCode.OUT_OF_RANGE: OutOfRangeError,
    StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    StatusCode.UNAVAILABLE: UnavailableError,
    StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    StatusCode.DATA_LOSS: DataLossError,
    StatusCode.UNIMPLEMENTED: UnimplementedError,
    StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    StatusCode.PERMISSION_DENIED: PermissionDeniedError,
}

ERROR_NAMES = ["Error"] + [cls.__name__ for cls in _BY_CODE.values()]


def make_error(code, message):
    """The shelf.Error subclass of `code`, as the system module raises it."""
    name = _code_name(code)
    exc = _BY_CODE.get(code, Error)(f"{name}: {message}")
    exc.code = int(code)
    exc.code_name = name
    exc.message = message
    return exc


def check(code):
    """Raises the error of a C API call's `code` (with its message) unless OK."""
    if code != 0:
        raise make_error(code, _native.error_message())


class Status:
    """The outcome of one item of a batch."""

    __slots__ = ("_code", "_message")

    def __init__(self, code, message=""):
        self._code = int(code)
        self._message = message

    @property
    def code(self):
        try:
            return StatusCode(self._code)
        except ValueError:
            return StatusCode.UNKNOWN

    @property
    def name(self):
        return _code_name(self._code)

    @property
    def message(self):
        return self._message

    @property
    def ok(self):
        return self._code == 0

    def __bool__(self):
        return self.ok

    def __repr__(self):
        if self.ok:
            return "<shelf.Status OK>"
        return f"<shelf.Status {self.name}: {self._message}>"

    def raise_if_error(self):
        """Raises the matching shelf.Error unless OK."""
        if not self.ok:
            raise make_error(self._code, self._message)


def item_status(code):
    """A batch item's Status: the C API gives an item its code; the message
    names the code (the batch's last message belongs to one item only)."""
    return Status(code, "" if code == 0 else _code_name(code))
