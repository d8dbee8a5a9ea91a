"""torch.cuda's memory statistics from stalloc's, in PyTorch's format.

Under any pluggable allocator PyTorch's own torch.cuda.memory_stats, memory_allocated,
memory_reserved, max_memory_*, memory_summary and reset_peak_memory_stats raise ("does not yet
support getDeviceStats"). These functions answer them from stalloc's statistics, and
stalloc.enable() installs them in torch.cuda (patch_torch) so that a training loop's calls work.

Where the figures come from:
- allocation / active (counts) and allocated_bytes / active_bytes / requested_bytes: every
  request PyTorch made, counted by libstalloc_torch.so per pool as PyTorch splits them (small:
  up to 1 MiB): current, peak, allocated and freed in all. stalloc hands out exactly the bytes
  asked for, so allocated, active and requested bytes are the same figures.
- reserved_bytes.all.current / .peak: physical memory stalloc holds (chunks of the plan pool,
  the packed arenas, the cache), the runtime's reserved_bytes and peak_reserved_bytes.
- segment.all: chunks stalloc holds (current), created (allocated) and released (freed).
- num_ooms, num_alloc_retries: out-of-memory errors raised, and allocations that failed once
  and were retried after waiting for pending frees.
Always 0 (stalloc has no such thing, or does not count it): inactive_split*, oversize_*,
reserved_bytes and segment per pool and their allocated / freed / peak where not listed above,
num_sync_all_streams, max_split_size.
"""

import collections
import sys

from ._library import load_library

_METRICS = ("current", "peak", "allocated", "freed")
_POOLS = ("all", "small_pool", "large_pool")


def _zero_stat():
    return {m: 0 for m in _METRICS}


def _zero_pools():
    return {p: _zero_stat() for p in _POOLS}


def _torch():
    """The torch module if it was imported, without importing it."""
    return sys.modules.get("torch")


def _device_index(device):
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    torch = _torch()
    cuda = getattr(torch, "cuda", None)
    resolve = getattr(cuda, "_get_device_index", None)
    if resolve is not None:
        return resolve(device, optional=True)
    if device is None:
        return 0
    if isinstance(device, str):
        _, _, index = device.partition(":")
        return int(index) if index else 0
    index = getattr(device, "index", None)
    return 0 if index is None else index


def _cuda_initialized():
    """False when torch was imported and CUDA is not initialised yet (PyTorch then reports {})."""
    torch = _torch()
    cuda = getattr(torch, "cuda", None)
    is_initialized = getattr(cuda, "is_initialized", None)
    return True if is_initialized is None else bool(is_initialized())


def _all_stats():
    from ._api import stats

    return stats()


def memory_stats_as_nested_dict(device=None):
    """torch.cuda.memory_stats_as_nested_dict under stalloc: PyTorch's nested layout."""
    if not _cuda_initialized():
        return {}
    d = str(_device_index(device))
    everything = _all_stats()
    runtime = everything.get("devices", {}).get(d)
    requests = everything.get("pytorch", {}).get(d)
    nested = {
        name: _zero_pools()
        for name in (
            "allocation",
            "active",
            "segment",
            "inactive_split",
            "allocated_bytes",
            "active_bytes",
            "requested_bytes",
            "reserved_bytes",
            "inactive_split_bytes",
        )
    }
    nested["oversize_allocations"] = _zero_stat()
    nested["oversize_segments"] = _zero_stat()
    for key in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
                "num_device_free", "max_split_size"):
        nested[key] = 0
    if runtime is None or requests is None:
        return nested  # this device has served nothing yet
    for pool in _POOLS:
        counts = requests["allocation"][pool]
        nbytes = requests["requested_bytes"][pool]
        nested["allocation"][pool] = dict(counts)
        nested["active"][pool] = dict(counts)
        for name in ("allocated_bytes", "active_bytes", "requested_bytes"):
            nested[name][pool] = dict(nbytes)
    nested["reserved_bytes"]["all"]["current"] = runtime["reserved_bytes"]
    nested["reserved_bytes"]["all"]["peak"] = runtime["peak_reserved_bytes"]
    nested["segment"]["all"]["current"] = requests["live_chunks"]
    nested["segment"]["all"]["allocated"] = requests["chunk_creates"]
    nested["segment"]["all"]["freed"] = requests["chunk_releases"]
    nested["num_alloc_retries"] = requests["num_alloc_retries"]
    nested["num_ooms"] = requests["num_ooms"]
    nested["num_device_alloc"] = requests["chunk_creates"]
    nested["num_device_free"] = requests["chunk_releases"]
    return nested


def memory_stats(device=None):
    """torch.cuda.memory_stats under stalloc: {"allocated_bytes.all.current": ..., ...}."""
    result = []

    def flatten(prefix, obj):
        if isinstance(obj, dict):
            for key, value in obj.items():
                flatten(f"{prefix}.{key}" if prefix else key, value)
        else:
            result.append((prefix, obj))

    flatten("", memory_stats_as_nested_dict(device))
    result.sort()
    return collections.OrderedDict(result)


def memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    """Peaks (allocated, reserved, counts) restart from the current values."""
    load_library().stalloc_reset_peak_stats(_device_index(device))


def reset_accumulated_memory_stats(device=None):
    """What was allocated and freed in all, num_ooms and num_alloc_retries restart from 0."""
    load_library().stalloc_reset_accumulated_stats(_device_index(device))


# What enable() puts in torch.cuda and torch.cuda.memory. memory_allocated, memory_reserved,
# max_memory_*, memory_cached, memory_summary and reset_max_memory_* of PyTorch call these two
# modules' memory_stats and reset_peak_memory_stats by name, so they work too.
PATCHED = {
    "memory_stats": memory_stats,
    "memory_stats_as_nested_dict": memory_stats_as_nested_dict,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
}


def patch_torch(torch):
    """Installs PATCHED in torch.cuda.memory (where PyTorch's functions look them up) and in
    torch.cuda (what user code calls); returns the names patched."""
    patched = []
    for prefix, module in (("torch.cuda.memory", getattr(torch.cuda, "memory", None)),
                           ("torch.cuda", torch.cuda)):
        if module is None:
            continue
        for name, function in PATCHED.items():
            setattr(module, name, function)
            patched.append(f"{prefix}.{name}")
    return patched
