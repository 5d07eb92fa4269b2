"""Checks of the Python layer's scalar and index arguments, before anything reaches the
extension: integers are integers (a float or a bool is not silently truncated) that fit the
C++ side's int32, index lists become int32 arrays only when every value fits, and every error
names the argument ("cu_seqlens_q[1]: expected an integer, got float 2.7").

Type problems (None, a str, a float where an integer is needed) raise TypeError; dtype problems
of index arrays DTypeError; values out of range InvalidArgumentError (a ValueError).
"""

import numbers
import operator

import numpy as np

from ._errors import DTypeError, InvalidArgumentError

INT32_MIN = -2**31
INT32_MAX = 2**31 - 1


def describe(x):
    """What was given, for the "got ..." part of a message."""
    if x is None:
        return "None"
    if isinstance(x, (bool, np.bool_)):
        return f"bool {bool(x)}"
    if isinstance(x, (float, np.floating)):
        return f"float {float(x)!r}"
    if isinstance(x, (complex, np.complexfloating)):
        return f"complex {complex(x)!r}"
    if isinstance(x, str):
        return f"str {x[:40]!r}"
    if isinstance(x, np.ndarray):
        return f"a {x.dtype.name} array of shape {x.shape}"
    return type(x).__qualname__


def out_of_range(name, lo, hi, got):
    return InvalidArgumentError(f"{name}: expected an integer in [{lo}, {hi}], got {got}", "invalid_argument", name)


def integer(value, name, lo=INT32_MIN, hi=INT32_MAX):
    """`value` as a Python int in [lo, hi]: ints, numpy integers, anything with __index__; not a
    bool, a float (even 4.0) or a str."""
    if type(value) is int:
        v = value
    else:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name}: expected an integer, got {describe(value)}")
        try:
            v = operator.index(value)
        except TypeError:
            raise TypeError(f"{name}: expected an integer, got {describe(value)}") from None
    if v < lo or v > hi:
        raise out_of_range(name, lo, hi, v)
    return v


def _element_name(name, shape, flat_index):
    idx = np.unravel_index(flat_index, shape) if len(shape) > 1 else (flat_index,)
    return f"{name}[{', '.join(str(int(i)) for i in idx)}]"


def _flat(values):
    for x in values:
        if isinstance(x, (list, tuple)):
            yield from _flat(x)
        else:
            yield x


def int_array(values, name, lo=INT32_MIN, hi=INT32_MAX):
    """A list / tuple / numpy array of integers as a numpy integer array whose values lie in
    [lo, hi]; the first element that is not an integer or is out of range is named."""
    try:
        a = np.asarray(values)
    except (ValueError, TypeError, OverflowError):  # ragged nesting, odd objects
        raise TypeError(f"{name}: expected a sequence of integers (rectangular when nested), "
                        f"got {describe(values)}") from None
    if a.size == 0:
        return np.zeros(a.shape, np.int32)
    if a.dtype.kind in "iu" and isinstance(values, (list, tuple)):
        # numpy reads [False, True, 3] as integers: a bool among them is named, as alone.
        for i, x in enumerate(_flat(values)):
            if isinstance(x, (bool, np.bool_)):
                integer(x, _element_name(name, a.shape, i), lo, hi)
    if a.dtype.kind not in "iu":  # float, bool, str, object (ints beyond int64, mixtures): check each
        items = list(_flat(values)) if isinstance(values, (list, tuple)) else list(a.flat)
        checked = [integer(x, _element_name(name, a.shape, i), lo, hi) for i, x in enumerate(items)]
        return np.array(checked, dtype=np.int64).reshape(a.shape)
    bad = (a < lo) | (a > hi)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise out_of_range(_element_name(name, a.shape, i), lo, hi, int(a.flat[i]))
    return a


def index_array(values, name):
    """cu_seqlens, append_indptr, page indices, page-table arrays given on the host: a numpy
    array must already be int32 (as arrays of every other framework, and as FlashAttention and
    FlashInfer want them: an int64 array is not narrowed behind the caller's back, which would
    copy it on every call); a list or tuple of integers becomes one when every value fits."""
    if isinstance(values, np.ndarray):
        if values.dtype != np.int32:
            from ._arrays import dtype_name
            hint = "; convert it once with .astype(np.int32)" if values.dtype.kind in "iu" else ""
            raise DTypeError(f"{name}: expected dtype int32, got dtype {dtype_name(values.dtype)}{hint}",
                             "invalid_argument", name)
        return values
    if isinstance(values, (list, tuple)):
        return np.ascontiguousarray(int_array(values, name), dtype=np.int32)
    raise TypeError(f"{name}: expected an int32 array or a sequence of integers, got {describe(values)}")


def lengths(values, name):
    """Per-request counts or ids for the host-side planners (q_lens, kv_lens, seqs): a list /
    tuple or an integer array of any framework (copied to the host), one dim, int32 values (the
    library checks their sign, with better words). Returns a list of Python ints."""
    if values is None:
        raise TypeError(f"{name}: expected a sequence of integers or an integer array, got None")
    if not isinstance(values, (list, tuple, np.ndarray)):
        from ._arrays import adapter_for
        values = adapter_for(values, name).to_numpy(values)
    a = int_array(values, name)
    if a.ndim != 1:
        raise InvalidArgumentError(f"{name}: expected 1 dim (one entry per request), got {a.ndim} dims "
                                   f"of shape {a.shape}", "invalid_argument", name)
    return [int(x) for x in a.tolist()]


def real(value, name, allow_none=False):
    """`value` as a Python float: ints, floats, numpy scalars; not a bool, a str, a complex or an
    array. None passes through when allow_none. (Finite, positive and so on: the library checks.)"""
    if type(value) is float:
        return value
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a real number{' or None' if allow_none else ''}, got {describe(value)}")
    try:
        return float(value)
    except OverflowError:  # an int past float's range (10**400)
        raise InvalidArgumentError(f"{name}: expected a real number within float's range, got {describe(value)}",
                                   "invalid_argument", name) from None


def flag(value, name):
    """`value` as a Python bool: a bool, a numpy bool, or the integers 0 and 1; not a str, an
    array or another number (bool() would take "no" as True)."""
    if type(value) is bool:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name}: expected a bool, got {describe(value)}")
