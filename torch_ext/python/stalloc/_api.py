"""The user-facing functions: enable, step, stats, dump_snapshot, save_trace, set_oom_wait."""

import ctypes
import json
import os

from ._library import StallocError, check, library_path, load_library, oom_library_path
from ._memory import patch_torch

_ERROR_BYTES = 1024


def _rank_suffixed(path):
    """Under torchrun every rank writes its own file: trace.txt -> trace.rank3.txt."""
    rank = os.environ.get("RANK")
    if rank is None or "{rank}" in path:
        return path.replace("{rank}", rank or "0")
    root, ext = os.path.splitext(path)
    return f"{root}.rank{rank}{ext}"


def _key(item):
    return item.split(":", 1)[0].strip()


def _over(base, conf):
    """STALLOC_CONF `conf` over `base`: conf's keys replace base's; a key given twice within one
    of them is still refused by the library."""
    keys = {_key(item) for item in conf.split(",") if item.strip()}
    kept = [item for item in base.split(",") if item.strip() and _key(item) not in keys]
    return ",".join(kept + [item for item in conf.split(",") if item.strip()])


def _check_torch_version(torch):
    """stalloc plugs in through torch.cuda.memory.CUDAPluggableAllocator (PyTorch 2.0+)."""
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    if memory is None or not hasattr(memory, "CUDAPluggableAllocator"):
        version = getattr(torch, "__version__", "unknown")
        raise StallocError(
            f"stalloc needs PyTorch 2.0 or newer (torch.cuda.memory.CUDAPluggableAllocator); "
            f"this PyTorch is {version}. Upgrade PyTorch, or run without stalloc."
        )


def enable(conf=""):
    """Makes stalloc PyTorch's CUDA allocator. Call before anything initialises CUDA in PyTorch:
    the first CUDA tensor, but also torch.cuda.set_device() or torch.cuda.current_device()
    (under torchrun, enable() first, then set_device(local_rank)).

    conf uses the STALLOC_CONF syntax ("key:value,key:value"); it is applied on top of the
    STALLOC_CONF environment variable. Raises StallocError for a bad configuration, or when
    PyTorch's allocator is already in use.

    Besides the allocator and its hooks (record_stream, empty_cache, memory fraction), it
    installs: a hook that refuses CUDA graph capture with the reason (PyTorch 2.3+; 2.0-2.2 by
    their older hook), PyTorch's out-of-memory error when libstalloc_torch_oom.so was built
    (else a failed allocation is a RuntimeError with the same message), and stalloc's versions
    of torch.cuda.memory_stats and friends (stalloc/_memory.py). What it did is in
    stalloc.integration().
    """
    import torch  # imported here so that stats() and friends work without torch installed

    _check_torch_version(torch)

    # Initialising CUDA (set_device included) initialises PyTorch's caching allocator, after
    # which it cannot be swapped.
    if torch.cuda.is_initialized():
        raise StallocError(
            "stalloc.enable() came too late: CUDA is already initialised in this process "
            "(a CUDA tensor, torch.cuda.set_device() or another torch.cuda call came first), "
            "and PyTorch cannot swap its allocator then. Call stalloc.enable() first."
        )
    lib = load_library()
    error = ctypes.create_string_buffer(_ERROR_BYTES)
    merged = _over(os.environ.get("STALLOC_CONF", ""), conf)
    check(lib.stalloc_configure(merged.encode(), error, _ERROR_BYTES), error)

    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        str(library_path()), "stalloc_malloc", "stalloc_free"
    )
    native = allocator.allocator()
    hooks = []
    for setter, symbol in (
        ("set_record_stream_fn", "stalloc_record_stream"),
        ("set_reset_fn", "stalloc_reset"),
        ("set_memory_fraction_fn", "stalloc_set_memory_fraction"),
    ):
        if hasattr(native, setter):
            getattr(native, setter)(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
            hooks.append(setter)
    # CUDA graph capture: PyTorch tells the allocator before the capture begins; stalloc refuses
    # it there with the reason, rather than let a graph keep addresses it will reuse.
    if hasattr(native, "set_begin_allocate_to_pool"):  # PyTorch 2.3+
        native.set_begin_allocate_to_pool(lib.stalloc_begin_allocate_to_pool_address())
        hooks.append("set_begin_allocate_to_pool")
    elif hasattr(native, "set_begin_allocate_stream_to_pool"):  # PyTorch 2.0-2.2
        native.set_begin_allocate_stream_to_pool(
            ctypes.cast(lib.stalloc_begin_allocate_stream_to_pool, ctypes.c_void_p).value
        )
        hooks.append("set_begin_allocate_stream_to_pool")
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as exc:
        raise StallocError(
            "stalloc.enable() came too late: PyTorch's CUDA allocator has already allocated "
            "memory in this process. Call stalloc.enable() before creating any CUDA tensor "
            f"(PyTorch said: {exc})"
        ) from exc
    _INTEGRATION["enabled"] = True
    _INTEGRATION["hooks"] = hooks
    _INTEGRATION["out_of_memory_error"] = _install_oom_error(lib)
    _INTEGRATION["patched"] = patch_torch(torch)
    return allocator


_INTEGRATION = {"enabled": False, "hooks": [], "out_of_memory_error": None, "patched": []}
_OOM_LIBRARY = None  # kept loaded: libstalloc_torch.so calls into it


def _install_oom_error(lib):
    """Registers libstalloc_torch_oom.so's thrower of c10::OutOfMemoryError when it was built;
    returns the Python class a failed allocation raises."""
    global _OOM_LIBRARY
    path = oom_library_path()
    if path is None:
        return "RuntimeError"
    try:
        _OOM_LIBRARY = ctypes.CDLL(str(path))
        thrower = ctypes.cast(_OOM_LIBRARY.stalloc_throw_torch_oom, ctypes.c_void_p).value
    except (OSError, AttributeError) as exc:
        raise StallocError(f"cannot load {path} (built against another PyTorch?): {exc}") from exc
    lib.stalloc_set_oom_thrower(thrower)
    return "torch.cuda.OutOfMemoryError"


def enabled():
    """Whether enable() has made stalloc PyTorch's allocator in this process."""
    return _INTEGRATION["enabled"]


def integration():
    """What enable() installed: PyTorch hooks set, the out-of-memory error a failed allocation
    raises ("torch.cuda.OutOfMemoryError", or "RuntimeError" without libstalloc_torch_oom.so),
    and the torch.cuda functions replaced by stalloc's."""
    return {key: (list(value) if isinstance(value, list) else value) for key, value in _INTEGRATION.items()}


def set_oom_wait(seconds):
    """How long a failed allocation waits for pending frees before raising (default 1.2 s:
    retries after emptying the cache at once and after 1, 10, 100 and 1000 ms)."""
    load_library().stalloc_set_oom_wait(float(seconds))


def step():
    """Marks the end of a training iteration (profiling, planning and replay follow it)."""
    load_library().stalloc_step()


def stats():
    """The allocator's statistics as a dict (allocated, reserved, peaks, matches, misses, ...)."""
    lib = load_library()
    size = lib.stalloc_stats_json(None, 0)
    while True:
        # Another thread may allocate in between and make the JSON longer: then ask again.
        buffer = ctypes.create_string_buffer(size + 1)
        needed = lib.stalloc_stats_json(buffer, size + 1)
        if needed <= size:
            return json.loads(buffer.value.decode())
        size = needed


def _write(function, path):
    error = ctypes.create_string_buffer(_ERROR_BYTES)
    path = _rank_suffixed(os.fspath(path))
    check(function(path.encode(), error, _ERROR_BYTES), error)
    return path


def dump_snapshot(path):
    """Writes a PyTorch-format memory snapshot (open it at pytorch.org/memory_viz)."""
    return _write(load_library().stalloc_dump_snapshot, path)


def save_trace(path):
    """Writes the recorded allocation trace in stalloc's format (stalloc inspect/plan/sim read it)."""
    return _write(load_library().stalloc_save_trace, path)


__all__ = [
    "StallocError",
    "dump_snapshot",
    "enable",
    "integration",
    "save_trace",
    "set_oom_wait",
    "stats",
    "step",
]
