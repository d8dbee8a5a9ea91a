// Links the installed runtime and serves one request on the host emulation: the headers, the
// libraries and their dependencies are found through find_package(stalloc) alone.
#include <cstdio>
#include <cstring>

#include "common/version.h"
#include "src/runtime.h"

int main() {
  stalloc::Runtime runtime(stalloc::parse_runtime_config("backend:host"));
  void* p = runtime.malloc(1 << 20, 0, 0);
  if (p == nullptr) return 1;
  std::memset(p, 0x5a, 1 << 20);
  runtime.free(p, 1 << 20, 0, 0);
  const stalloc::RuntimeStats s = runtime.stats();
  if (s.allocations != 1 || s.frees != 1 || s.allocated_bytes != 0) return 2;
  std::printf("stalloc %s: one request served and freed\n", STALLOC_VERSION);
  return 0;
}
