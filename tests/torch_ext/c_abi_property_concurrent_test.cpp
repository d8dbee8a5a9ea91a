// A property-based harness for the C ABI (libstalloc_torch.so), as a careless or hostile caller
// would use it: random sequences of malloc, free, record_stream, step, stats, memory fractions
// and empty_cache from several threads on several devices and streams, with bad frees mixed in
// (unknown pointers, double frees, interior pointers, wrong sizes, the wrong device). After
// every call the invariants are checked against a shadow model of each device:
//   - no two live blocks overlap, and every pattern written reads back before its free;
//   - PyTorch's statistics (allocations and requested bytes, all/small/large) equal the
//     shadow's, and the invalid frees counted equal those made;
//   - after a failed allocation the device holds no more than before it.
// Threads sharing a device take its lock around a call and its check, so that the shadow is
// exact; the runtimes' planning threads, the other devices and the process-wide registry run
// beside them (TSan in CI). Sized for seconds; STALLOC_STRESS_SCALE=N runs N times longer.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/torch_ext/c_abi.h"

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;
constexpr std::size_t kSmall = kMiB;  // PyTorch's small pool: requests up to 1 MiB
constexpr int kFirstDevice = 20;
constexpr int kDevices = 3;
constexpr int kThreads = 6;  // two per device

int scale() {
  const char* text = std::getenv("STALLOC_STRESS_SCALE");
  const int n = text == nullptr ? 1 : std::atoi(text);
  return n > 0 ? n : 1;
}

std::string stats_json() {
  std::string json(stalloc_stats_json(nullptr, 0), '\0');
  // Another thread may have grown the JSON meanwhile: ask again until it fits.
  while (true) {
    const std::size_t need = stalloc_stats_json(json.data(), json.size() + 1);
    if (need <= json.size()) {
      json.resize(need);
      return json;
    }
    json.assign(need, '\0');
  }
}

// The number after the keys, each looked for after the one before (the JSON's layout is fixed:
// {"devices":{"D":{...}},"pytorch":{"D":{"allocation":{"all":{"current":N,...}}}}}).
std::uint64_t number_at(const std::string& json, std::initializer_list<std::string> keys) {
  std::size_t at = 0;
  for (const std::string& key : keys) {
    at = json.find("\"" + key + "\":", at);
    if (at == std::string::npos) throw std::runtime_error("no " + key + " in " + json);
    at += key.size() + 3;
  }
  return std::stoull(json.substr(at));
}

struct Block {
  unsigned char* p = nullptr;
  std::size_t size = 0;
  std::uint64_t tag = 0;
  void* stream = nullptr;
};

// What a device's statistics must say.
struct Shadow {
  std::mutex lock;
  std::map<unsigned char*, Block> live;  // by address, to find overlaps
  std::uint64_t count[3] = {0, 0, 0};    // all, small, large
  std::uint64_t bytes[3] = {0, 0, 0};
  std::uint64_t invalid_frees = 0;
  void add(std::size_t size, int sign) {
    const int pool = size <= kSmall ? 1 : 2;
    for (int k : {0, pool}) {
      count[k] += static_cast<std::uint64_t>(sign);
      bytes[k] += static_cast<std::uint64_t>(sign) * size;
    }
  }
};

void fill(const Block& b) {
  const auto byte = static_cast<unsigned char>(b.tag);
  std::memset(b.p, byte, std::min<std::size_t>(b.size, 64));
  std::memset(b.p + b.size - std::min<std::size_t>(b.size, 64), byte, std::min<std::size_t>(b.size, 64));
}

bool intact(const Block& b) {
  const auto byte = static_cast<unsigned char>(b.tag);
  const std::size_t n = std::min<std::size_t>(b.size, 64);
  for (std::size_t i = 0; i < n; ++i) {
    if (b.p[i] != byte || b.p[b.size - 1 - i] != byte) return false;
  }
  return true;
}

struct Failures {
  std::mutex lock;
  std::vector<std::string> what;
  void add(const std::string& w) {
    std::lock_guard<std::mutex> g(lock);
    if (what.size() < 20) what.push_back(w);
  }
};

// The statistics of `device` against its shadow (its lock held).
void check_stats(int device, const Shadow& s, Failures* failures, const char* after) {
  const std::string json = stats_json();
  const std::string d = std::to_string(device);
  const char* pools[3] = {"all", "small_pool", "large_pool"};
  for (int k = 0; k < 3; ++k) {
    const std::uint64_t count = number_at(json, {"pytorch", d, "allocation", pools[k], "current"});
    const std::uint64_t bytes = number_at(json, {"pytorch", d, "requested_bytes", pools[k], "current"});
    if (count != s.count[k] || bytes != s.bytes[k]) {
      failures->add(std::string("after ") + after + ", device " + d + " " + pools[k] + ": " +
                    std::to_string(count) + " allocations of " + std::to_string(bytes) +
                    " bytes, the shadow has " + std::to_string(s.count[k]) + " of " +
                    std::to_string(s.bytes[k]));
    }
  }
  const std::uint64_t invalid = number_at(json, {"devices", d, "invalid_frees"});
  if (invalid != s.invalid_frees) {
    failures->add(std::string("after ") + after + ", device " + d + ": " + std::to_string(invalid) +
                  " invalid frees counted, " + std::to_string(s.invalid_frees) + " made");
  }
}

// 0 before the device's first request (it has no runtime yet).
std::uint64_t reserved(int device) {
  const std::string json = stats_json();
  std::string key = "\"";
  key += std::to_string(device);
  key += "\":{";
  if (json.find(key) == std::string::npos) return 0;
  return number_at(json, {"devices", std::to_string(device), "reserved_bytes"});
}

TEST(CAbiProperty, RandomCallsFromThreadsKeepEveryInvariant) {
  char error[256] = {};
  ASSERT_EQ(stalloc_set_host_lag(3, 11, error, sizeof error), 0) << error;
  // Explicit steps only (as stalloc.step() from a training loop): a boundary found inside a
  // malloc would install a plan there, and the pool it makes is not the failure's.
  ASSERT_EQ(stalloc_configure("backend:host,granularity:65536,capacity:8MiB,auto_step:false", error,
                              sizeof error),
            0)
      << error;
  stalloc_set_oom_wait(0);
  std::array<Shadow, kDevices> shadows;
  Failures failures;
  const int ops = 1500 * scale();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(0x5eed + static_cast<std::uint64_t>(t));
      const int device = kFirstDevice + t % kDevices;
      Shadow& shadow = shadows[static_cast<std::size_t>(t % kDevices)];
      std::uint64_t tag = static_cast<std::uint64_t>(t) << 32;
      auto stream = [&] { return reinterpret_cast<void*>(std::uintptr_t{0x1000} * (1 + rng() % 3)); };
      for (int op = 0; op < ops; ++op) {
        const std::uint64_t r = rng() % 100;
        std::unique_lock<std::mutex> lock(shadow.lock);
        if (r < 45 || shadow.live.empty()) {
          const std::size_t size = r % 3 == 0 ? 1 + rng() % (4 * kKiB)
                                   : r % 3 == 1 ? kKiB + rng() % kMiB
                                                : kMiB + rng() % (2 * kMiB);
          const std::uint64_t before = reserved(device);
          Block b{nullptr, size, ++tag, stream()};
          try {
            b.p = static_cast<unsigned char*>(stalloc_malloc(size, device, b.stream));
          } catch (const std::exception& e) {
            // Out of memory raises, as PyTorch's allocator does: it must hold no more.
            if (const std::uint64_t after = reserved(device); after > before) {
              failures.add("an allocation of " + std::to_string(size) + " bytes failed and the device holds " +
                           std::to_string(after) + " bytes, " + std::to_string(before) + " before: " + e.what());
            }
            check_stats(device, shadow, &failures, "a failed malloc");
            continue;
          }
          if (b.p == nullptr) {
            failures.add("malloc returned null without raising");
            continue;
          }
          auto next = shadow.live.lower_bound(b.p);
          const bool overlaps = (next != shadow.live.end() && next->first < b.p + size) ||
                                (next != shadow.live.begin() &&
                                 std::prev(next)->first + std::prev(next)->second.size > b.p);
          if (overlaps) failures.add("a new block overlaps a live one");
          fill(b);
          shadow.live[b.p] = b;
          shadow.add(size, +1);
          check_stats(device, shadow, &failures, "malloc");
        } else if (r < 80) {
          auto it = shadow.live.begin();
          std::advance(it, static_cast<long>(rng() % shadow.live.size()));
          const Block b = it->second;
          if (!intact(b)) failures.add("a pattern did not read back before its free");
          shadow.live.erase(it);
          shadow.add(b.size, -1);
          const std::uint64_t how = rng() % 10;
          // A wrong size or the wrong device: the runtime frees by its own records.
          const std::size_t told = how == 0 ? b.size + 1 : b.size;
          const int named = how == 1 ? kFirstDevice + (device - kFirstDevice + 1) % kDevices : device;
          stalloc_free(b.p, told, named, b.stream);
          if (how == 2) {  // a double free, before any malloc can reuse the address
            stalloc_free(b.p, b.size, device, b.stream);
            ++shadow.invalid_frees;
          }
          check_stats(device, shadow, &failures, "free");
        } else if (r < 86) {
          // An interior pointer and a pointer nobody served: counted, nothing freed.
          const Block& b = shadow.live.begin()->second;
          if (b.size > 64) {
            stalloc_free(b.p + 64, b.size - 64, device, b.stream);
            ++shadow.invalid_frees;
          }
          int on_stack = 0;
          stalloc_free(&on_stack, sizeof on_stack, device, nullptr);
          ++shadow.invalid_frees;
          check_stats(device, shadow, &failures, "a bad free");
        } else if (r < 92) {
          stalloc_record_stream(shadow.live.begin()->second.p, stream());
        } else if (r < 97 && r >= 95) {
          stalloc_set_memory_fraction(0.5 + static_cast<double>(rng() % 51) / 100.0, device);
        } else {
          // step() and empty_cache reach every device: with all of them held, so that no
          // device's check sees them half done.
          lock.unlock();
          std::scoped_lock all(shadows[0].lock, shadows[1].lock, shadows[2].lock);
          if (r < 95) {
            stalloc_step();
          } else {
            stalloc_reset();
          }
        }
      }
      std::lock_guard<std::mutex> g(shadow.lock);
      for (const auto& [p, b] : shadow.live) {
        if (!intact(b)) failures.add("a pattern did not read back at the end");
        stalloc_free(b.p, b.size, device, b.stream);
        shadow.add(b.size, -1);
      }
      shadow.live.clear();
      check_stats(device, shadow, &failures, "the last frees");
    });
  }
  for (auto& th : threads) th.join();
  // The runtimes live as long as the process (as PyTorch's allocator does): their planning
  // threads are joined here, not at exit.
  stalloc_wait_for_planning();
  for (const std::string& w : failures.what) ADD_FAILURE() << w;
  for (int d = 0; d < kDevices; ++d) {
    EXPECT_EQ(number_at(stats_json(), {"devices", std::to_string(kFirstDevice + d), "allocated_bytes"}), 0u);
  }
}

}  // namespace
