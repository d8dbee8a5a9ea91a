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
    lib.stalloc_stats_json.argtypes = [c.c_char_p, c.c_size_t]
    lib.stalloc_stats_json.restype = c.c_size_t
    lib.stalloc_dump_snapshot.argtypes = [c.c_char_p, c.c_char_p, c.c_size_t]
    lib.stalloc_dump_snapshot.restype = c.c_int
    lib.stalloc_save_trace.argtypes = [c.c_char_p, c.c_char_p, c.c_size_t]
    lib.stalloc_save_trace.restype = c.c_int
    return lib


def load_library():
    """Loads the library once per process and returns the ctypes handle."""
    global _LIB
    if _LIB is None:
        _LIB = _declare(ctypes.CDLL(str(library_path())))
    return _LIB


def check(status, error_buffer):
    if status != 0:
        raise StallocError(error_buffer.value.decode("utf-8", "replace"))
