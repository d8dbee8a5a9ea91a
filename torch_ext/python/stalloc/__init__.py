"""stalloc for PyTorch: a planned, fragmentation-free CUDA caching allocator.

    import stalloc
    stalloc.enable("mode:alias")      # before the first CUDA tensor
    for batch in data:
        train_step(batch)
        stalloc.step()                # marks an iteration boundary
    print(stalloc.stats())

Pure Python over ctypes: it loads libstalloc_torch.so (the C ABI that
torch.cuda.memory.CUDAPluggableAllocator takes) and needs no compiled extension.
"""

from ._library import StallocError, library_path, load_library
from ._api import dump_snapshot, enable, save_trace, stats, step

__all__ = [
    "StallocError",
    "dump_snapshot",
    "enable",
    "library_path",
    "load_library",
    "save_trace",
    "stats",
    "step",
]
