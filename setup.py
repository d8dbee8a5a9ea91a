"""Builds the stalloc package's shared libraries with the project's CMake build.

libstalloc_torch.so (the C ABI PyTorch's pluggable allocator loads) is built from the tree and
copied into the package; where the Python that runs the build imports torch,
libstalloc_torch_oom.so is built against that PyTorch too (torch.cuda.OutOfMemoryError on a
failed allocation). Everything else is in pyproject.toml.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
LIBRARIES = ("libstalloc_torch.so", "libstalloc_torch_oom.so")


class BuildWithLibraries(build_py):
    def run(self):
        super().run()
        build_dir = Path(self.get_finalized_command("build").build_temp) / "cmake"
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
            "-DSTALLOC_BUILD_TESTS=OFF", "-DSTALLOC_BUILD_BENCH=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "stalloc_torch",
                               "-j", str(os.cpu_count() or 2)])
        package = Path(self.build_lib) / "stalloc"
        for name in LIBRARIES:
            built = build_dir / "lib" / name
            if built.exists():
                shutil.copy2(built, package / name)
        if not (package / LIBRARIES[0]).exists():
            raise RuntimeError(f"{LIBRARIES[0]} was not built in {build_dir}")


class BinaryDistribution(Distribution):
    """The package ships a shared library: its wheel is for this platform, not any."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibraries}, distclass=BinaryDistribution)
