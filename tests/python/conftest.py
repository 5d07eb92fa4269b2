"""Fixtures shared by the Python tests: outputs poisoned and so checked written."""

import numpy as np
import pytest


def _poison(a):
    """NaN in every element of a float array (0xA5 in every byte of an integer one)."""
    if a.dtype.kind in "iub":
        a.view(np.uint8)[...] = 0xA5
    else:
        a[...] = np.nan
    return a


@pytest.fixture(autouse=True)
def poisoned_numpy_outputs(monkeypatch):
    """Every array tessera allocates on the host (outputs, LSE, workspaces) starts poisoned
    instead of as whatever np.empty hands back, often zeros: an element a kernel leaves unwritten
    then fails its check instead of passing for the 0 of a fully masked row or an unseen key."""
    try:
        from tessera import _arrays
    except ImportError:  # the script tests run without the extension
        yield
        return
    for cls in (_arrays._NumpyAdapter, _arrays._GenericCpuAdapter):
        for name in ("empty", "empty_like"):
            real = cls.__dict__.get(name)
            if real is not None:
                monkeypatch.setattr(cls, name, lambda self, *a, _real=real, **kw: _poison(_real(self, *a, **kw)))
    yield
