"""Exceptions raised by tessera.

Each C++ ``tessera::Error`` becomes an instance of one of the classes below, chosen by its
code. Every class also derives from the matching built-in exception, so callers may catch
``ValueError``, ``TypeError``, ``NotImplementedError``, ``RuntimeError`` or ``MemoryError``
without knowing about tessera:

=====================  ===========================  ==========================
C++ ErrorCode          class                        built-in base
=====================  ===========================  ==========================
invalid_argument       InvalidArgumentError         ValueError
(dtype problems)       DTypeError                   TypeError
unsupported            UnsupportedError             NotImplementedError
workspace_too_small    WorkspaceTooSmallError       ValueError
plan_mismatch          PlanMismatchError            ValueError
backend_failure        BackendError                 RuntimeError
out_of_memory          OutOfMemoryError             MemoryError
=====================  ===========================  ==========================

``str(e)`` is the C++ message ("<function>: <argument>: expected ..., got ..."); ``e.code``
is the code's name and ``e.argument`` the argument at fault ("" when none applies).

The Python layer's own argument checks (tessera._checks: integers, index lists; the bindings:
read-only outputs) raise InvalidArgumentError and DTypeError too, with code "invalid_argument"
as the C++ ones, and a plain TypeError for an object of the wrong kind (None, a str, a float
where an integer is needed).
"""


class Error(Exception):
    """Base of every error raised by the tessera C++ library."""

    def __init__(self, message: str, code: str = "", argument: str = ""):
        super().__init__(message)
        self.code = code
        self.argument = argument


class InvalidArgumentError(Error, ValueError):
    pass


class DTypeError(Error, TypeError):
    pass


class UnsupportedError(Error, NotImplementedError):
    pass


class WorkspaceTooSmallError(Error, ValueError):
    pass


class PlanMismatchError(Error, ValueError):
    pass


class BackendError(Error, RuntimeError):
    pass


class OutOfMemoryError(Error, MemoryError):
    pass


ERROR_TYPES = {
    "invalid_argument": InvalidArgumentError,
    "dtype": DTypeError,
    "unsupported": UnsupportedError,
    "workspace_too_small": WorkspaceTooSmallError,
    "plan_mismatch": PlanMismatchError,
    "backend_failure": BackendError,
    "out_of_memory": OutOfMemoryError,
}
