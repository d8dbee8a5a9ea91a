"""stalloc.enable() against a stand-in for torch: which allocator it installs, and its errors.

Its own process (no allocation served yet), so configuring is allowed.
"""

import os
import sys
import types
import unittest

os.environ["STALLOC_CONF"] = "backend:host,granularity:65536"

import stalloc  # noqa: E402


class FakeAllocator:
    def __init__(self, path, alloc, free):
        self.args = (path, alloc, free)
        self.native = types.SimpleNamespace(calls=[])
        for name in ("set_record_stream_fn", "set_reset_fn", "set_memory_fraction_fn"):
            setattr(self.native, name, lambda ptr, name=name: self.native.calls.append((name, ptr)))

    def allocator(self):
        return self.native


def fake_torch(change, initialized=False):
    memory = types.SimpleNamespace(CUDAPluggableAllocator=FakeAllocator, change_current_allocator=change)
    cuda = types.SimpleNamespace(memory=memory, is_initialized=lambda: initialized)
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
        self.assertEqual(names, ["set_memory_fraction_fn", "set_record_stream_fn", "set_reset_fn"])
        self.assertTrue(all(ptr for _, ptr in allocator.native.calls))

    def test_bad_configuration_is_a_clear_error(self):
        sys.modules["torch"] = fake_torch(lambda a: None)
        with self.assertRaises(stalloc.StallocError) as ctx:
            stalloc.enable("no_such_key:1")
        self.assertIn("no_such_key", str(ctx.exception))

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
