// Plan files (docs/formats.md, "Plan files"): a versioned, line-oriented text format. Chunk lists
// are written as ascending runs ("0-511,700"), which keeps offset plans and budgets short.
#include <fstream>
#include <istream>
#include <ostream>
#include <sstream>

#include "common/error.h"
#include "common/units.h"
#include "planner/chunk/chunk_plan.h"

namespace stalloc {

namespace {

constexpr std::string_view kMagic = "stalloc-plan";
// Bounds what a hostile file can make the reader allocate: far above any real plan's chunk
// lists (hundreds of thousands of ids), far below a memory problem (256 MiB).
constexpr std::uint64_t kMaxListedChunks = 1ull << 26;

std::string_view kind_name(SlotKind k) {
  switch (k) {
    case SlotKind::Static: return "static";
    case SlotKind::Small: return "small";
    case SlotKind::Dynamic: return "dynamic";
  }
  return "static";
}

void write_chunk_list(std::ostream& out, const std::vector<std::uint32_t>& chunks) {
  if (chunks.empty()) {
    out << '-';
    return;
  }
  for (std::size_t i = 0; i < chunks.size();) {
    std::size_t j = i;
    while (j + 1 < chunks.size() && chunks[j + 1] == chunks[j] + 1) ++j;
    if (i > 0) out << ',';
    out << chunks[i];
    if (j > i) out << '-' << chunks[j];
    i = j + 1;
  }
}

class PlanReader {
 public:
  PlanReader(std::istream& in, const std::string& name) : in_(in), name_(name) {}

  // The next line's whitespace-separated words; fails at end of input.
  std::vector<std::string> next(const std::string& expected) {
    std::string line;
    if (!std::getline(in_, line)) fail("unexpected end of file, expected " + expected);
    ++line_;
    std::istringstream words(line);
    std::vector<std::string> out;
    for (std::string w; words >> w;) out.push_back(w);
    if (out.empty()) fail("empty line, expected " + expected);
    return out;
  }

  // A line "KEY VALUE" with an unsigned VALUE.
  std::uint64_t number_line(const std::string& key) {
    auto words = next("'" + key + " NUMBER'");
    if (words.size() != 2 || words[0] != key) fail("expected '" + key + " NUMBER'");
    return number(words[1], key);
  }

  std::uint32_t number32_line(const std::string& key) {
    auto words = next("'" + key + " NUMBER'");
    if (words.size() != 2 || words[0] != key) fail("expected '" + key + " NUMBER'");
    return number32(words[1], key);
  }

  std::uint64_t number(const std::string& word, const std::string& what) {
    auto v = parse_u64(word);
    if (!v) fail("expected an unsigned integer for " + what + ", got '" + word + "'");
    return *v;
  }

  std::uint32_t number32(const std::string& word, const std::string& what) {
    std::uint64_t v = number(word, what);
    if (v > UINT32_MAX) fail(what + " " + word + " is out of range");
    return static_cast<std::uint32_t>(v);
  }

  // Chunk ids must be below `limit`, which also bounds what a hostile file can make us allocate.
  std::vector<std::uint32_t> chunk_list(const std::string& word, const std::string& what,
                                        std::uint64_t limit) {
    std::vector<std::uint32_t> out;
    if (word == "-") return out;
    std::size_t pos = 0;
    while (pos <= word.size()) {
      std::size_t comma = word.find(',', pos);
      if (comma == std::string::npos) comma = word.size();
      const std::string run = word.substr(pos, comma - pos);
      const std::size_t dash = run.find('-');
      const std::uint32_t lo = number32(run.substr(0, dash), what);
      const std::uint32_t hi = dash == std::string::npos ? lo : number32(run.substr(dash + 1), what);
      if (hi < lo) fail(what + ": run '" + run + "' is descending");
      if (hi >= limit) {
        fail(what + ": chunk " + std::to_string(hi) + " is not below num_chunks " +
             std::to_string(limit));
      }
      listed_ += std::uint64_t{hi} - lo + 1;
      if (listed_ > kMaxListedChunks) {
        fail("the plan lists more than " + std::to_string(kMaxListedChunks) + " chunk ids");
      }
      for (std::uint64_t c = lo; c <= hi; ++c) out.push_back(static_cast<std::uint32_t>(c));
      pos = comma + 1;
    }
    return out;
  }

  [[noreturn]] void fail(const std::string& what) const { throw ParseError(name_, line_, what); }
  std::size_t line() const { return line_; }

 private:
  std::istream& in_;
  const std::string& name_;
  std::size_t line_ = 0;
  std::uint64_t listed_ = 0;  // chunk ids expanded so far
};

}  // namespace

void write_plan(const ChunkPlan& plan, std::ostream& out) {
  out << kMagic << ' ' << ChunkPlan::kFormatVersion << '\n';
  out << "mode " << plan_mode_name(plan.mode) << '\n';
  out << "granularity " << plan.granularity << '\n';
  out << "signature " << std::hex << plan.signature.hash << std::dec << " allocations "
      << plan.signature.allocations << " requests " << plan.signature.requests << '\n';
  out << "iteration " << plan.iteration << '\n';
  out << "num_chunks " << plan.num_chunks << '\n';
  out << "windows " << plan.windows << '\n';
  out << "remainder " << remainder_placement_name(plan.remainder) << '\n';
  out << "lower_bound_bytes " << plan.lower_bound_bytes << '\n';
  out << "dynamic_peak_bytes " << plan.dynamic_peak_bytes << '\n';
  out << "mappings " << plan.mappings << '\n';
  out << "vmm_ops_per_iteration " << plan.vmm_ops_per_iteration << '\n';
  out << "slots " << plan.slots.size() << '\n';
  for (const PlannedSlot& s : plan.slots) {
    out << "slot " << s.ordinal << ' ' << s.size << ' ' << s.stream << ' ' << s.start << ' '
        << s.end << ' ' << kind_name(s.kind) << ' ' << s.offset << ' ';
    write_chunk_list(out, s.chunks);
    out << ' ';
    write_chunk_list(out, s.budget_chunks);
    out << '\n';
  }
  out << "end\n";
}

void write_plan(const ChunkPlan& plan, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw UsageError("cannot write plan file '" + path + "'");
  write_plan(plan, out);
  out.flush();
  if (!out) throw UsageError("error while writing plan file '" + path + "'");
}

ChunkPlan read_plan(std::istream& in, const std::string& name_for_errors) {
  PlanReader r(in, name_for_errors);
  ChunkPlan plan;
  auto header = r.next("'stalloc-plan VERSION'");
  if (header.size() != 2 || header[0] != kMagic) r.fail("expected 'stalloc-plan VERSION'");
  if (r.number(header[1], "the version") != ChunkPlan::kFormatVersion) {
    r.fail("unsupported plan format version " + header[1] + ", expected " +
           std::to_string(ChunkPlan::kFormatVersion));
  }
  auto mode = r.next("'mode alias|windowed|offset'");
  if (mode.size() != 2 || mode[0] != "mode" || !parse_plan_mode(mode[1], &plan.mode)) {
    r.fail("expected 'mode alias|windowed|offset'");
  }
  plan.granularity = r.number_line("granularity");
  if (plan.granularity == 0) r.fail("granularity must be positive");
  const std::string sig_form = "'signature HEX allocations N requests N'";
  auto sig = r.next(sig_form);
  if (sig.size() != 6 || sig[0] != "signature" || sig[2] != "allocations" ||
      sig[4] != "requests" || sig[1].size() > 16 ||
      sig[1].find_first_not_of("0123456789abcdef") != std::string::npos) {
    r.fail("expected " + sig_form);
  }
  plan.signature.hash = std::stoull(sig[1], nullptr, 16);
  plan.signature.allocations = r.number(sig[3], "allocations");
  plan.signature.requests = r.number(sig[5], "requests");
  plan.iteration = r.number32_line("iteration");
  plan.num_chunks = r.number_line("num_chunks");
  if (plan.num_chunks > std::uint64_t{UINT32_MAX} + 1) r.fail("num_chunks is out of range");
  plan.windows = r.number32_line("windows");
  if (plan.windows == 0) r.fail("windows must be at least 1");
  auto rem = r.next("'remainder widened|aligned'");
  if (rem.size() != 2 || rem[0] != "remainder") r.fail("expected 'remainder widened|aligned'");
  if (rem[1] == "widened") {
    plan.remainder = RemainderPlacement::Widened;
  } else if (rem[1] == "aligned") {
    plan.remainder = RemainderPlacement::Aligned;
  } else {
    r.fail("expected 'remainder widened|aligned', got '" + rem[1] + "'");
  }
  plan.lower_bound_bytes = r.number_line("lower_bound_bytes");
  plan.dynamic_peak_bytes = r.number_line("dynamic_peak_bytes");
  plan.mappings = r.number_line("mappings");
  plan.vmm_ops_per_iteration = r.number_line("vmm_ops_per_iteration");
  const std::uint64_t count = r.number_line("slots");
  if (count > plan.signature.allocations) {
    r.fail("slots " + std::to_string(count) + " exceeds the signature's allocations " +
           std::to_string(plan.signature.allocations));
  }
  const std::string slot_form =
      "'slot ORDINAL SIZE STREAM START END static|small|dynamic OFFSET CHUNKS BUDGET'";
  for (std::uint64_t i = 0; i < count; ++i) {
    auto w = r.next(slot_form);
    if (w.size() != 10 || w[0] != "slot") r.fail("expected " + slot_form);
    PlannedSlot s;
    s.ordinal = r.number(w[1], "the ordinal");
    s.size = r.number(w[2], "the size");
    s.stream = r.number32(w[3], "the stream");
    s.start = r.number(w[4], "the start");
    s.end = r.number(w[5], "the end");
    if (s.end <= s.start) r.fail("slot end " + w[5] + " is not after its start " + w[4]);
    if (w[6] == "static") {
      s.kind = SlotKind::Static;
    } else if (w[6] == "small") {
      s.kind = SlotKind::Small;
    } else if (w[6] == "dynamic") {
      s.kind = SlotKind::Dynamic;
    } else {
      r.fail("expected static, small or dynamic, got '" + w[6] + "'");
    }
    s.offset = r.number(w[7], "the offset");
    s.chunks = r.chunk_list(w[8], "the chunk list", plan.num_chunks);
    s.budget_chunks = r.chunk_list(w[9], "the budget chunk list", plan.num_chunks);
    if (!plan.slots.empty() && s.ordinal <= plan.slots.back().ordinal) {
      r.fail("slot ordinals must ascend, " + w[1] + " follows " +
             std::to_string(plan.slots.back().ordinal));
    }
    plan.slots.push_back(std::move(s));
  }
  auto end = r.next("'end'");
  if (end.size() != 1 || end[0] != "end") r.fail("expected 'end'");
  return plan;
}

ChunkPlan read_plan(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot open plan file '" + path + "'");
  return read_plan(in, path);
}

}  // namespace stalloc
