#include "src/pool_runs.h"

namespace stalloc {

std::vector<std::uint32_t> pool_runs(const std::vector<const std::vector<std::uint32_t>*>& views,
                                     const std::vector<bool>& alone, std::uint32_t first,
                                     std::uint32_t count, std::uint32_t max_length) {
  std::vector<std::uint32_t> lengths;
  if (count <= first) return lengths;
  const std::uint32_t n = count - first;
  // joined[k]: chunks first + k and first + k + 1 may share a handle.
  std::vector<bool> held(n, false);
  std::vector<bool> joined(n, true);
  joined[n - 1] = false;
  for (const std::vector<std::uint32_t>* view : views) {
    const std::vector<std::uint32_t>& v = *view;
    for (std::size_t j = 0; j < v.size(); ++j) {
      const std::uint32_t c = v[j];
      if (c < first || c >= count) continue;
      const std::uint32_t k = c - first;
      held[k] = true;
      if (j + 1 == v.size() || v[j + 1] != c + 1) joined[k] = false;
      if (k > 0 && (j == 0 || v[j - 1] != c - 1)) joined[k - 1] = false;
    }
  }
  for (std::uint32_t k = 0; k < n; ++k) {
    if (held[k] && !(first + k < alone.size() && alone[first + k])) continue;
    joined[k] = false;
    if (k > 0) joined[k - 1] = false;
  }
  std::uint32_t length = 1;
  for (std::uint32_t k = 0; k < n; ++k) {
    if (joined[k] && length < max_length) {
      ++length;
      continue;
    }
    lengths.push_back(length);
    length = 1;
  }
  return lengths;
}

}  // namespace stalloc
