// libstalloc_torch_oom.so: raises stalloc's out-of-memory error as PyTorch's own,
// c10::OutOfMemoryError, which PyTorch turns into torch.cuda.OutOfMemoryError in Python (and which
// its C++ code catches where it catches its own allocator's). Built against PyTorch's headers and
// libc10 when the build finds them (torch_ext/CMakeLists.txt); stalloc.enable() registers it with
// stalloc_set_oom_thrower. Without it a failed allocation raises a RuntimeError with the same
// message.
#include <c10/util/Exception.h>

extern "C" __attribute__((visibility("default"))) [[noreturn]] void stalloc_throw_torch_oom(
    const char* message) {
  C10_THROW_ERROR(OutOfMemoryError, message);
}
