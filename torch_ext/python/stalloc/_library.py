"""Finding and loading libstalloc_torch.so, and the C signatures of its functions."""

import ctypes
import os
from pathlib import Path


class StallocError(RuntimeError):
    """An error reported by stalloc (bad configuration, a file that cannot be written, ...)."""


_LIB = None


def library_path():
    """The shared library: $STALLOC_LIBRARY, else next to this package, else the build tree."""
    env = os.environ.get("STALLOC_LIBRARY")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    candidates = [
        here / "libstalloc_torch.so",
        here.parents[2] / "build" / "lib" / "libstalloc_torch.so",
    ]
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise StallocError(
        "libstalloc_torch.so not found: build stalloc (scripts/build.sh) or set STALLOC_LIBRARY; "
        "looked in " + ", ".join(str(c) for c in candidates)
    )


def _declare(lib):
    c = ctypes
    lib.stalloc_configure.argtypes = [c.c_char_p, c.c_char_p, c.c_size_t]
    lib.stalloc_configure.restype = c.c_int
    lib.stalloc_malloc.argtypes = [c.c_size_t, c.c_int, c.c_void_p]
    lib.stalloc_malloc.restype = c.c_void_p
    lib.stalloc_free.argtypes = [c.c_void_p, c.c_size_t, c.c_int, c.c_void_p]
    lib.stalloc_free.restype = None
    lib.stalloc_record_stream.argtypes = [c.c_void_p, c.c_void_p]
    lib.stalloc_record_stream.restype = None
    lib.stalloc_reset.argtypes = []
    lib.stalloc_reset.restype = None
    lib.stalloc_set_memory_fraction.argtypes = [c.c_double, c.c_int]
    lib.stalloc_set_memory_fraction.restype = None
    lib.stalloc_step.argtypes = []
    lib.stalloc_step.restype = None
    lib.stalloc_wait_for_planning.argtypes = []
    lib.stalloc_wait_for_planning.restype = None
    lib.stalloc_stats_json.argtypes = [c.c_char_p, c.c_size_t]
    lib.stalloc_stats_json.restype = c.c_size_t
    lib.stalloc_dump_snapshot.argtypes = [c.c_char_p, c.c_char_p, c.c_size_t]
    lib.stalloc_dump_snapshot.restype = c.c_int
    lib.stalloc_save_trace.argtypes = [c.c_char_p, c.c_char_p, c.c_size_t]
    lib.stalloc_save_trace.restype = c.c_int
    lib.stalloc_set_host_lag.argtypes = [c.c_uint, c.c_ulonglong, c.c_char_p, c.c_size_t]
    lib.stalloc_set_host_lag.restype = c.c_int
    lib.stalloc_reset_peak_stats.argtypes = [c.c_int]
    lib.stalloc_reset_peak_stats.restype = None
    lib.stalloc_reset_accumulated_stats.argtypes = [c.c_int]
    lib.stalloc_reset_accumulated_stats.restype = None
    lib.stalloc_set_oom_thrower.argtypes = [c.c_void_p]
    lib.stalloc_set_oom_thrower.restype = None
    lib.stalloc_set_oom_wait.argtypes = [c.c_double]
    lib.stalloc_set_oom_wait.restype = None
    lib.stalloc_begin_allocate_to_pool_address.argtypes = []
    lib.stalloc_begin_allocate_to_pool_address.restype = c.c_void_p
    return lib


def oom_library_path():
    """libstalloc_torch_oom.so (raises torch.cuda.OutOfMemoryError): $STALLOC_OOM_LIBRARY, else
    next to libstalloc_torch.so; None when it was not built (no PyTorch headers at build time)."""
    env = os.environ.get("STALLOC_OOM_LIBRARY")
    if env:
        return Path(env)
    candidate = library_path().with_name("libstalloc_torch_oom.so")
    return candidate if candidate.exists() else None


def load_library():
    """Loads the library once per process and returns the ctypes handle."""
    global _LIB
    if _LIB is None:
        _LIB = _declare(ctypes.CDLL(str(library_path())))
    return _LIB


def check(status, error_buffer):
    if status != 0:
        raise StallocError(error_buffer.value.decode("utf-8", "replace"))
