// Search over orderings. No ordering of the portfolio wins everywhere, and on irregular
// instances the same rule with a slightly different order lands anywhere between 1.001x and
// 1.07x the lower bound. So orders are drawn at random and placed greedily (OccupancyTree): the
// key of a buffer is a * log(size) + b * log(lifetime) + c * log(1 + conflicts) + noise * u,
// u uniform per buffer, placed by lowest offset or best fit. Half the draws are uniform over
// the parameters (a, b, c in [0, 1], noise in [0, 0.5], either rule); the other half perturb
// the parameters of the best placement so far (each by up to +-0.15, same rule), at first those
// of size order with a little lifetime and conflicts at the lowest offset: orders near a good
// one are good more often than random ones (measured on the irregular instances, where size
// dominant, a little lifetime, lowest offset wins most often).
#include "planner/dsa/dsa_order_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "planner/dsa/dsa_heuristics.h"
#include "planner/dsa/dsa_occupancy.h"

namespace stalloc::dsa_detail {

namespace {

using Clock = std::chrono::steady_clock;

struct Params {
  double a = 1;
  double b = 0;
  double c = 0;
  double noise = 0;
  Placement placement = Placement::BestFit;
};

}  // namespace

OrderSearchResult improve_by_orders(const OrderSearchRequest& request) {
  const std::vector<DsaBuffer>& buffers = *request.buffers;
  const std::size_t n = buffers.size();
  OrderSearchResult result;
  result.offsets = *request.incumbent;
  result.peak = placement_peak(buffers, result.offsets);
  DsaProblem problem;
  problem.buffers = buffers;
  const std::uint64_t target = std::max(request.target, dsa_lower_bound(problem));
  std::mt19937_64 rng(request.seed);
  auto unit = [&] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  std::vector<double> log_size(n);
  std::vector<double> log_length(n);
  std::vector<double> log_degree(n);
  for (std::size_t i = 0; i < n; ++i) {
    log_size[i] = std::log(static_cast<double>(buffers[i].size));
    log_length[i] = std::log(static_cast<double>(buffers[i].upper - buffers[i].lower));
    log_degree[i] = std::log(1.0 + static_cast<double>(request.index->degree(i)));
  }
  OccupancyTree tree(buffers);
  std::vector<double> key(n);
  std::vector<double> best_key;  // the keys of the best order drawn, once one beat the incumbent
  std::vector<std::uint32_t> order(n);
  // Until a draw beats the incumbent, perturbations are of size order with a little lifetime
  // and conflicts, lowest offset: the region that wins most often on irregular instances.
  Params best{1.0, 0.1, 0.1, 0.1, Placement::LowestOffset};
  auto stopped = [&] {
    if (request.shared_best != nullptr &&
        request.shared_best->load(std::memory_order_relaxed) <= target) {
      return true;
    }
    return Clock::now() >= request.deadline;
  };
  auto out_of_work = [&] {
    return request.work_limit != 0 && request.work_limit - result.work < n;
  };
  while (result.peak > target && !out_of_work() && !stopped()) {
    Params p;
    const std::uint64_t draw = rng() % 3;
    if (draw == 0 && !best_key.empty()) {
      // The best order itself, shaken: each key moved by up to +-sigma/2, sigma log-uniform from
      // 0.001 to 0.3 (keys are sums of logarithms: a few units apart).
      p = best;
      const double sigma = 0.001 * std::pow(300.0, unit());
      for (std::size_t i = 0; i < n; ++i) key[i] = best_key[i] + sigma * (unit() - 0.5);
      if (rng() % 2 == 0) {
        // Squeaky wheel: the buffers that reach above the target in the best placement go
        // earlier, by a random amount.
        const double boost = 0.01 * std::pow(100.0, unit());
        for (std::size_t i = 0; i < n; ++i) {
          if (result.offsets[i] + buffers[i].size > target) key[i] += boost * unit();
        }
      }
    } else if (draw == 1) {
      auto nudge = [&](double v, double hi) { return std::clamp(v + 0.3 * (unit() - 0.5), 0.0, hi); };
      p = best;
      p.a = nudge(best.a, 1.0);
      p.b = nudge(best.b, 1.0);
      p.c = nudge(best.c, 1.0);
      p.noise = nudge(best.noise, 0.5);
    } else {
      p.a = unit();
      p.b = unit();
      p.c = unit();
      p.noise = 0.5 * unit();
      p.placement = rng() % 2 == 0 ? Placement::LowestOffset : Placement::BestFit;
    }
    if (draw != 0 || best_key.empty()) {
      for (std::size_t i = 0; i < n; ++i) {
        key[i] = p.a * log_size[i] + p.b * log_length[i] + p.c * log_degree[i] + p.noise * unit();
      }
    }
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) {
      return key[x] > key[y] || (key[x] == key[y] && x < y);
    });
    const auto offsets = place_in_order(buffers, order, p.placement, &tree, request.deadline);
    if (offsets.empty()) break;  // the deadline came first
    ++result.orders;
    result.work += n;
    const std::uint64_t peak = placement_peak(buffers, offsets);
    if (peak < result.peak) {
      result.peak = peak;
      result.offsets = offsets;
      ++result.improvements;
      best = p;
      best_key = key;
      if (request.shared_best != nullptr) {
        std::uint64_t seen = request.shared_best->load(std::memory_order_relaxed);
        while (peak < seen &&
               !request.shared_best->compare_exchange_weak(seen, peak, std::memory_order_relaxed)) {
        }
      }
    }
  }
  return result;
}

}  // namespace stalloc::dsa_detail
