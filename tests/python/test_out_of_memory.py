"""An allocation that fails under stalloc.enable(): the error PyTorch would see.

With libstalloc_torch_oom.so (built against PyTorch's headers) registered by enable(), the failed
allocation throws c10::OutOfMemoryError, which PyTorch turns into torch.cuda.OutOfMemoryError;
without it, std::runtime_error (a RuntimeError). Both messages start as PyTorch's own.

No PyTorch here: the helper is compiled from torch_ext/torch_oom.cpp against a stand-in of
c10/util/Exception.h, the allocation is made through ctypes in a child process (ctypes cannot
catch a C++ exception, so the child ends in std::terminate, which prints the exception's type
and message), and torch itself is a stand-in module.
"""

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STAND_IN_C10 = """
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
namespace c10 {
struct SourceLocation { const char* function; const char* file; std::uint32_t line; };
class Error : public std::exception {
 public:
  Error(SourceLocation, std::string msg) : msg_(std::move(msg)) {}
  const char* what() const noexcept override { return msg_.c_str(); }
 private:
  std::string msg_;
};
class OutOfMemoryError : public Error { using Error::Error; };
}  // namespace c10
#define C10_THROW_ERROR(err_type, msg) \\
  throw ::c10::err_type({__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)}, msg)
"""

CHILD = textwrap.dedent(
    """
    import sys, types
    import stalloc

    class FakeAllocator:
        def __init__(self, path, alloc, free):
            self.native = types.SimpleNamespace()
        def allocator(self):
            return self.native

    memory = types.SimpleNamespace(CUDAPluggableAllocator=FakeAllocator,
                                   change_current_allocator=lambda a: None)
    cuda = types.SimpleNamespace(memory=memory, is_initialized=lambda: False)
    sys.modules["torch"] = types.SimpleNamespace(cuda=cuda)
    stalloc.enable("")
    print("error:", stalloc.integration()["out_of_memory_error"], flush=True)
    stalloc.set_oom_wait(0.01)
    lib = stalloc.load_library()
    p = lib.stalloc_malloc(100000, 0, None)
    assert p
    lib.stalloc_malloc(64 << 20, 0, None)  # past the capacity: throws
    print("returned", flush=True)
    """
)


def compiler():
    return shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")


class OutOfMemoryTest(unittest.TestCase):
    def run_child(self, oom_library):
        env = dict(os.environ)
        env["STALLOC_CONF"] = "backend:host,granularity:65536,capacity:1MiB"
        env.pop("STALLOC_OOM_LIBRARY", None)
        if oom_library is not None:
            env["STALLOC_OOM_LIBRARY"] = str(oom_library)
        # The child aborts on purpose: no core file.
        no_core = lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # noqa: E731
        return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                              text=True, timeout=120, preexec_fn=no_core)

    def check_aborted_with(self, child, error, exception_type):
        self.assertIn(f"error: {error}", child.stdout, child.stderr)
        self.assertNotIn("returned", child.stdout)
        self.assertEqual(child.returncode, -signal.SIGABRT, child.stderr)
        self.assertIn(f"terminate called after throwing an instance of '{exception_type}'", child.stderr)
        self.assertIn("what():  CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0: stalloc holds",
                      child.stderr)
        self.assertIn("capacity of 1.00 MiB", child.stderr)

    @unittest.skipIf(compiler() is None, "no C++ compiler to build the stand-in helper")
    def test_with_the_helper_the_error_is_pytorchs_out_of_memory_error(self):
        with tempfile.TemporaryDirectory() as d:
            include = Path(d) / "include" / "c10" / "util"
            include.mkdir(parents=True)
            (include / "Exception.h").write_text(STAND_IN_C10)
            helper = Path(d) / "libstalloc_torch_oom.so"
            subprocess.run([compiler(), "-std=c++17", "-shared", "-fPIC", "-o", str(helper),
                            "-isystem", str(Path(d) / "include"), str(ROOT / "torch_ext" / "torch_oom.cpp")],
                           check=True, timeout=300)
            self.check_aborted_with(self.run_child(helper), "torch.cuda.OutOfMemoryError",
                                    "c10::OutOfMemoryError")

    def test_without_the_helper_the_error_is_a_runtime_error_with_the_same_message(self):
        self.check_aborted_with(self.run_child(None), "RuntimeError", "std::runtime_error")

    def test_a_helper_that_does_not_load_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as d:
            bogus = Path(d) / "libstalloc_torch_oom.so"
            bogus.write_text("not a library")
            child = self.run_child(bogus)
            self.assertNotEqual(child.returncode, 0)
            self.assertIn("StallocError: cannot load", child.stderr)


if __name__ == "__main__":
    unittest.main()
