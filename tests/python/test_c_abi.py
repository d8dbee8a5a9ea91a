"""The C ABI of libstalloc_torch.so through the Python package, on the host backend.

Run by CTest with STALLOC_LIBRARY pointing at the built library and PYTHONPATH at
torch_ext/python.
"""

import ctypes
import os
import pickle
import tempfile
import unittest

os.environ["STALLOC_CONF"] = "backend:host,granularity:65536"

import stalloc  # noqa: E402

MiB = 1 << 20


class CAbiTest(unittest.TestCase):
    def setUp(self):
        self.lib = stalloc.load_library()

    def test_malloc_write_free_and_stats(self):
        ptrs = []
        for i, size in enumerate((4 * MiB, 3000, 1 * MiB + 17)):
            p = self.lib.stalloc_malloc(size, 0, None)
            self.assertIsNotNone(p, f"allocation {i} failed")
            ctypes.memset(p, 0x5A, size)
            ptrs.append((p, size))
        for p, size in ptrs:
            self.assertEqual(ctypes.string_at(p, 16), b"\x5a" * 16)
            self.assertEqual(ctypes.string_at(p + size - 16, 16), b"\x5a" * 16)
        s = stalloc.stats()["devices"]["0"]
        self.assertGreaterEqual(s["allocated_bytes"], 5 * MiB + 3017)
        self.assertGreaterEqual(s["reserved_bytes"], s["allocated_bytes"])
        for p, size in ptrs:
            self.lib.stalloc_free(p, size, 0, None)
        stalloc.step()
        after = stalloc.stats()["devices"]["0"]
        self.assertEqual(after["allocated_bytes"], 0)
        self.assertGreaterEqual(after["iterations"], 1)

    def test_snapshot_is_a_plain_pickle_and_trace_is_written(self):
        p = self.lib.stalloc_malloc(2 * MiB, 0, None)
        self.assertIsNotNone(p)
        with tempfile.TemporaryDirectory() as d:
            snap = stalloc.dump_snapshot(os.path.join(d, "snap.pickle"))
            with open(snap, "rb") as f:
                data = pickle.load(f)
            self.assertIn("segments", data)
            self.assertIn("device_traces", data)
            trace = stalloc.save_trace(os.path.join(d, "run.trace"))
            with open(trace) as f:
                self.assertTrue(f.readline().startswith("stalloc-trace"))
        self.lib.stalloc_free(p, 2 * MiB, 0, None)

    def test_configure_after_first_allocation_is_refused(self):
        p = self.lib.stalloc_malloc(4096, 0, None)
        self.assertIsNotNone(p)
        err = ctypes.create_string_buffer(256)
        self.assertNotEqual(self.lib.stalloc_configure(b"mode:alias", err, 256), 0)
        self.assertIn(b"already serving", err.value)
        self.lib.stalloc_free(p, 4096, 0, None)


if __name__ == "__main__":
    unittest.main()
