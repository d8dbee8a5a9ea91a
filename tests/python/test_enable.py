"""stalloc.enable() against a stand-in for torch: which allocator it installs, and its errors.

Its own process (no allocation served yet), so configuring is allowed.
"""

import os
import sys
import types
import unittest

os.environ["STALLOC_CONF"] = "backend:host,granularity:65536"

import stalloc  # noqa: E402

MiB = 1 << 20


HOOKS = ("set_record_stream_fn", "set_reset_fn", "set_memory_fraction_fn", "set_begin_allocate_to_pool")


class FakeAllocator:
    hooks = HOOKS

    def __init__(self, path, alloc, free):
        self.args = (path, alloc, free)
        self.native = types.SimpleNamespace(calls=[])
        for name in self.hooks:
            setattr(self.native, name, lambda ptr, name=name: self.native.calls.append((name, ptr)))

    def allocator(self):
        return self.native


class OldFakeAllocator(FakeAllocator):
    """PyTorch 2.0-2.2: the graph-pool hook has its older name."""

    hooks = HOOKS[:3] + ("set_begin_allocate_stream_to_pool",)


# torch/cuda/memory.py as PyTorch writes it, in a module of its own so that its functions look
# each other up by name as PyTorch's do; under a pluggable allocator torch._C raises.
TORCH_CUDA_MEMORY = """
import collections
def memory_stats(device=None):
    result = []
    def add(prefix, obj):
        if isinstance(obj, dict):
            if len(prefix) > 0:
                prefix += "."
            for k, v in obj.items():
                add(prefix + k, v)
        else:
            result.append((prefix, obj))
    add("", memory_stats_as_nested_dict(device=device))
    result.sort()
    return collections.OrderedDict(result)
def memory_stats_as_nested_dict(device=None):
    raise RuntimeError("CUDAPluggableAllocator does not yet support getDeviceStats. "
                       "If you need it, please file an issue describing your use case.")
def reset_peak_memory_stats(device=None):
    raise RuntimeError("CUDAPluggableAllocator does not yet support resetPeakStats.")
def reset_accumulated_memory_stats(device=None):
    raise RuntimeError("CUDAPluggableAllocator does not yet support resetAccumulatedStats.")
def reset_max_memory_allocated(device=None):
    return reset_peak_memory_stats(device=device)
def memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.current", 0)
def max_memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.peak", 0)
def memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.current", 0)
def max_memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.peak", 0)
def memory_summary(device=None):
    stats = memory_stats(device=device)
    lines = [f"CUDA OOMs: {stats['num_ooms']} | cudaMalloc retries: {stats['num_alloc_retries']}"]
    for metric in ("allocated_bytes", "active_bytes", "requested_bytes", "reserved_bytes",
                   "inactive_split_bytes", "allocation", "active", "segment", "inactive_split"):
        for pool in ("all", "large_pool", "small_pool"):
            prefix = metric + "." + pool + "."
            lines.append(" ".join(str(stats[prefix + m]) for m in ("current", "peak", "allocated", "freed")))
    for metric in ("oversize_allocations", "oversize_segments"):
        lines.append(" ".join(str(stats[metric + "." + m]) for m in ("current", "peak", "allocated", "freed")))
    return "\\n".join(lines)
"""


def fake_torch(change, initialized=False, allocator=FakeAllocator):
    memory = types.ModuleType("torch.cuda.memory")
    exec(TORCH_CUDA_MEMORY, memory.__dict__)
    memory.CUDAPluggableAllocator = allocator
    memory.change_current_allocator = change
    cuda = types.ModuleType("torch.cuda")
    cuda.memory = memory
    cuda.is_initialized = lambda: initialized
    cuda._get_device_index = lambda device, optional=False: 0 if device is None else int(device)
    for name in ("memory_stats", "memory_stats_as_nested_dict", "reset_peak_memory_stats",
                 "reset_accumulated_memory_stats", "memory_allocated", "max_memory_allocated",
                 "memory_reserved", "max_memory_reserved", "memory_summary", "reset_max_memory_allocated"):
        setattr(cuda, name, getattr(memory, name))
    return types.SimpleNamespace(cuda=cuda)


class EnableTest(unittest.TestCase):
    def tearDown(self):
        sys.modules.pop("torch", None)

    def test_enable_installs_the_pluggable_allocator_with_all_hooks(self):
        installed = []
        sys.modules["torch"] = fake_torch(installed.append)
        allocator = stalloc.enable("")
        self.assertEqual(installed, [allocator])
        self.assertEqual(allocator.args[1:], ("stalloc_malloc", "stalloc_free"))
        self.assertTrue(allocator.args[0].endswith("libstalloc_torch.so"))
        names = sorted(n for n, _ in allocator.native.calls)
        self.assertEqual(names, ["set_begin_allocate_to_pool", "set_memory_fraction_fn",
                                 "set_record_stream_fn", "set_reset_fn"])
        self.assertTrue(all(ptr for _, ptr in allocator.native.calls))
        info = stalloc.integration()
        self.assertEqual(sorted(info["hooks"]), names)
        # Not built here (no PyTorch headers): a failed allocation is a RuntimeError.
        self.assertEqual(info["out_of_memory_error"], "RuntimeError")
        self.assertIn("torch.cuda.memory_stats", info["patched"])
        self.assertIn("torch.cuda.memory.reset_peak_memory_stats", info["patched"])

    def test_older_pytorch_gets_the_older_graph_hook(self):
        sys.modules["torch"] = fake_torch(lambda a: None, allocator=OldFakeAllocator)
        allocator = stalloc.enable("")
        names = sorted(n for n, _ in allocator.native.calls)
        self.assertIn("set_begin_allocate_stream_to_pool", names)
        self.assertTrue(all(ptr for _, ptr in allocator.native.calls))

    def test_torch_memory_functions_answer_from_stalloc(self):
        torch = fake_torch(lambda a: None)
        sys.modules["torch"] = torch
        with self.assertRaises(RuntimeError):
            torch.cuda.memory_allocated()  # what every pluggable allocator gives
        stalloc.enable("")
        torch.cuda.is_initialized = lambda: True  # the first CUDA tensor came
        lib = stalloc.load_library()
        before = torch.cuda.memory_stats()
        p = lib.stalloc_malloc(3 * MiB, 0, None)
        q = lib.stalloc_malloc(1000, 0, None)
        self.assertTrue(p and q)
        # Every way user code reaches them: torch.cuda, torch.cuda.memory, PyTorch's own
        # functions that call memory_stats by name.
        self.assertEqual(torch.cuda.memory_allocated(), before["allocated_bytes.all.current"] + 3 * MiB + 1000)
        self.assertEqual(torch.cuda.memory.memory_allocated(0), torch.cuda.memory_allocated())
        stats = torch.cuda.memory_stats(0)
        self.assertEqual(stats["allocation.all.current"], before["allocation.all.current"] + 2)
        self.assertEqual(stats["allocation.small_pool.current"], before["allocation.small_pool.current"] + 1)
        self.assertEqual(stats["requested_bytes.large_pool.current"],
                         before["requested_bytes.large_pool.current"] + 3 * MiB)
        self.assertGreaterEqual(torch.cuda.memory_reserved(), torch.cuda.memory_allocated())
        self.assertGreaterEqual(torch.cuda.max_memory_reserved(), torch.cuda.memory_reserved())
        self.assertEqual(stats["reserved_bytes.all.current"], stalloc.stats()["devices"]["0"]["reserved_bytes"])
        self.assertGreater(stats["segment.all.current"], 0)
        self.assertIn("CUDA OOMs: 0", torch.cuda.memory_summary())
        lib.stalloc_free(p, 3 * MiB, 0, None)
        self.assertEqual(torch.cuda.max_memory_allocated(), stats["allocated_bytes.all.peak"])
        torch.cuda.reset_peak_memory_stats()
        self.assertEqual(torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated())
        self.assertEqual(torch.cuda.memory_stats()["allocation.all.peak"],
                         torch.cuda.memory_stats()["allocation.all.current"])
        torch.cuda.reset_max_memory_allocated()  # PyTorch's, through the patched reset
        torch.cuda.memory.reset_accumulated_memory_stats()
        after = torch.cuda.memory_stats()
        self.assertEqual(after["allocation.all.allocated"], 0)
        self.assertEqual(after["allocated_bytes.all.freed"], 0)
        lib.stalloc_free(q, 1000, 0, None)
        self.assertEqual(torch.cuda.memory_stats()["allocation.all.freed"], 1)
        # The same functions without torch's names: stalloc.memory_stats() and friends.
        self.assertEqual(stalloc.memory_allocated(), torch.cuda.memory_allocated())
        self.assertEqual(stalloc.memory_stats(), torch.cuda.memory_stats())

    def test_before_cuda_initialisation_stats_are_empty_as_pytorch_reports(self):
        torch = fake_torch(lambda a: None, initialized=False)
        sys.modules["torch"] = torch
        stalloc.enable("")
        self.assertEqual(torch.cuda.memory_stats(), {})
        self.assertEqual(torch.cuda.memory_allocated(), 0)

    def test_bad_configuration_is_a_clear_error(self):
        sys.modules["torch"] = fake_torch(lambda a: None)
        with self.assertRaises(stalloc.StallocError) as ctx:
            stalloc.enable("no_such_key:1")
        self.assertIn("no_such_key", str(ctx.exception))

    def test_conf_keys_replace_those_of_the_environment(self):
        # STALLOC_CONF sets granularity too: enable()'s value replaces it rather than repeat it.
        sys.modules["torch"] = fake_torch(lambda a: None)
        stalloc.enable("granularity:65536,profile_iterations:2")
        with self.assertRaises(stalloc.StallocError) as ctx:
            stalloc.enable("mode:alias,mode:offset")
        self.assertIn("given twice", str(ctx.exception))

    def test_pytorch_without_the_pluggable_interface_is_named(self):
        old = fake_torch(lambda a: None)
        del old.cuda.memory.CUDAPluggableAllocator
        old.__version__ = "1.13.1"
        sys.modules["torch"] = old
        with self.assertRaises(stalloc.StallocError) as ctx:
            stalloc.enable("")
        self.assertIn("PyTorch 2.0 or newer", str(ctx.exception))
        self.assertIn("1.13.1", str(ctx.exception))

    def test_too_late_is_a_clear_error(self):
        def refuse(allocator):
            raise RuntimeError("Can't swap an already initialized allocator")

        sys.modules["torch"] = fake_torch(refuse)
        with self.assertRaises(stalloc.StallocError) as ctx:
            stalloc.enable("")
        self.assertIn("before creating any CUDA tensor", str(ctx.exception))

    def test_after_cuda_initialisation_is_a_clear_error(self):
        installed = []
        sys.modules["torch"] = fake_torch(installed.append, initialized=True)
        with self.assertRaises(stalloc.StallocError) as ctx:
            stalloc.enable("")
        self.assertIn("set_device", str(ctx.exception))
        self.assertEqual(installed, [])


if __name__ == "__main__":
    unittest.main()
