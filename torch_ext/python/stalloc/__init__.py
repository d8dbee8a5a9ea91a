"""stalloc for PyTorch: a planned, fragmentation-free CUDA caching allocator.

    import stalloc
    stalloc.enable("mode:alias")      # before the first CUDA tensor
    for batch in data:
        train_step(batch)
        stalloc.step()                # marks an iteration boundary
    print(stalloc.stats())
    torch.cuda.max_memory_allocated()  # answered by stalloc.memory_stats() once enabled

Pure Python over ctypes: it loads libstalloc_torch.so (the C ABI that
torch.cuda.memory.CUDAPluggableAllocator takes) and needs no compiled extension.
"""

from ._library import StallocError, library_path, load_library
from ._api import dump_snapshot, enable, enabled, integration, save_trace, set_oom_wait, stats, step
from . import integrations
from ._memory import (
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_stats_as_nested_dict,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)

__all__ = [
    "StallocError",
    "dump_snapshot",
    "enable",
    "enabled",
    "integrations",
    "integration",
    "library_path",
    "load_library",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "save_trace",
    "set_oom_wait",
    "stats",
    "step",
]
