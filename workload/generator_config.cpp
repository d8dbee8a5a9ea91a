// GeneratorConfig's fields by name (for `stalloc gen --KEY VALUE` and the trace's meta) and the
// consistency rules a configuration must satisfy.
#include <functional>
#include <sstream>

#include "common/error.h"
#include "common/units.h"
#include "workload/generator.h"

namespace stalloc {
namespace {

struct Field {
  const char* name;  // command-line spelling
  std::function<void(GeneratorConfig&, std::string_view)> set;
  std::function<std::string(const GeneratorConfig&)> get;
  // Left out of describe_config while it has its default value: fields added after traces were
  // published (context parallelism, packed documents), so that every earlier configuration
  // still describes itself, and generates, byte for byte as before.
  bool omit_default = false;
};

std::uint64_t to_u64(std::string_view key, std::string_view v) {
  auto n = parse_u64(v);
  if (!n) throw UsageError("--" + std::string(key) + ": expected a non-negative integer, got '" +
                           std::string(v) + "'");
  return *n;
}

bool to_bool(std::string_view key, std::string_view v) {
  if (v == "on" || v == "true" || v == "1" || v == "yes") return true;
  if (v == "off" || v == "false" || v == "0" || v == "no") return false;
  throw UsageError("--" + std::string(key) + ": expected on|off, got '" + std::string(v) + "'");
}

double to_double(std::string_view key, std::string_view v) {
  std::string s(v);
  std::size_t used = 0;
  double d = 0;
  try {
    d = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty() || !(d >= 0)) {
    throw UsageError("--" + std::string(key) + ": expected a non-negative number, got '" + s + "'");
  }
  return d;
}

std::vector<std::uint64_t> to_list(std::string_view key, std::string_view v) {
  std::vector<std::uint64_t> out;
  while (!v.empty()) {
    auto comma = v.find(',');
    out.push_back(to_u64(key, v.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return out;
}

std::string from_bool(bool b) { return b ? "on" : "off"; }

std::string from_double(double d) {
  std::ostringstream os;
  os << d;
  return os.str();
}

#define STALLOC_U64_FIELD(key, member)                                                       \
  Field {                                                                                    \
    key, [](GeneratorConfig& c, std::string_view v) { c.member = to_u64(key, v); },         \
        [](const GeneratorConfig& c) { return std::to_string(c.member); }                    \
  }
#define STALLOC_BOOL_FIELD(key, member)                                                      \
  Field {                                                                                    \
    key, [](GeneratorConfig& c, std::string_view v) { c.member = to_bool(key, v); },         \
        [](const GeneratorConfig& c) { return from_bool(c.member); }                         \
  }

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      STALLOC_U64_FIELD("hidden", hidden),
      STALLOC_U64_FIELD("ffn", ffn),
      STALLOC_U64_FIELD("heads", heads),
      STALLOC_U64_FIELD("kv-heads", kv_heads),
      STALLOC_U64_FIELD("layers", layers),
      STALLOC_U64_FIELD("vocab", vocab),
      STALLOC_BOOL_FIELD("swiglu", swiglu),
      STALLOC_BOOL_FIELD("rope", rope),
      Field{"norm",
            [](GeneratorConfig& c, std::string_view v) {
              if (v == "layernorm") c.norm = NormKind::LayerNorm;
              else if (v == "rmsnorm") c.norm = NormKind::RmsNorm;
              else throw UsageError("--norm: expected layernorm|rmsnorm, got '" + std::string(v) + "'");
            },
            [](const GeneratorConfig& c) {
              return std::string(c.norm == NormKind::LayerNorm ? "layernorm" : "rmsnorm");
            }},
      STALLOC_BOOL_FIELD("bias", bias),
      STALLOC_BOOL_FIELD("dropout", dropout),
      STALLOC_U64_FIELD("seq-len", seq_len),
      STALLOC_U64_FIELD("seq-min", seq_min),
      STALLOC_U64_FIELD("seq-max", seq_max),
      Field{"seq-list",
            [](GeneratorConfig& c, std::string_view v) { c.seq_list = to_list("seq-list", v); },
            [](const GeneratorConfig& c) {
              std::string s;
              for (auto x : c.seq_list) {
                if (!s.empty()) s += ',';
                s += std::to_string(x);
              }
              return s.empty() ? std::string("none") : s;
            }},
      STALLOC_U64_FIELD("micro-batch", micro_batch),
      STALLOC_U64_FIELD("global-batch", global_batch),
      Field{"doc-min", [](GeneratorConfig& c, std::string_view v) { c.doc_min = to_u64("doc-min", v); },
            [](const GeneratorConfig& c) { return std::to_string(c.doc_min); }, true},
      Field{"doc-max", [](GeneratorConfig& c, std::string_view v) { c.doc_max = to_u64("doc-max", v); },
            [](const GeneratorConfig& c) { return std::to_string(c.doc_max); }, true},
      STALLOC_U64_FIELD("dp", dp),
      STALLOC_U64_FIELD("tp", tp),
      STALLOC_U64_FIELD("pp", pp),
      STALLOC_U64_FIELD("vpp", vpp),
      STALLOC_U64_FIELD("pipeline-rank", pipeline_rank),
      Field{"schedule",
            [](GeneratorConfig& c, std::string_view v) {
              if (v == "1f1b") c.schedule = PipelineScheduleKind::OneFOneB;
              else if (v == "interleaved") c.schedule = PipelineScheduleKind::Interleaved;
              else throw UsageError("--schedule: expected 1f1b|interleaved, got '" + std::string(v) + "'");
            },
            [](const GeneratorConfig& c) {
              return std::string(c.schedule == PipelineScheduleKind::OneFOneB ? "1f1b" : "interleaved");
            }},
      STALLOC_U64_FIELD("ep", ep),
      STALLOC_BOOL_FIELD("sequence-parallel", sequence_parallel),
      Field{"cp", [](GeneratorConfig& c, std::string_view v) { c.cp = to_u64("cp", v); },
            [](const GeneratorConfig& c) { return std::to_string(c.cp); }, true},
      STALLOC_BOOL_FIELD("distributed-optimizer", distributed_optimizer),
      STALLOC_BOOL_FIELD("comm-stream", comm_stream),
      STALLOC_BOOL_FIELD("lazy-adam-state", lazy_adam_state),
      STALLOC_U64_FIELD("grad-bucket-elems", grad_bucket_elems),
      STALLOC_U64_FIELD("cublas-workspace", cublas_workspace),
      STALLOC_BOOL_FIELD("attention-mask-in-dataloader", attention_mask_in_dataloader),
      Field{"recompute",
            [](GeneratorConfig& c, std::string_view v) {
              if (v == "none") c.recompute = RecomputeKind::None;
              else if (v == "selective") c.recompute = RecomputeKind::Selective;
              else if (v == "full") c.recompute = RecomputeKind::Full;
              else throw UsageError("--recompute: expected none|selective|full, got '" + std::string(v) + "'");
            },
            [](const GeneratorConfig& c) {
              switch (c.recompute) {
                case RecomputeKind::None: return std::string("none");
                case RecomputeKind::Selective: return std::string("selective");
                case RecomputeKind::Full: return std::string("full");
              }
              return std::string("none");
            }},
      STALLOC_BOOL_FIELD("flash-attention", flash_attention),
      STALLOC_U64_FIELD("experts", experts),
      STALLOC_U64_FIELD("top-k", top_k),
      STALLOC_U64_FIELD("shared-experts", shared_experts),
      STALLOC_U64_FIELD("expert-ffn", expert_ffn),
      Field{"routing-skew",
            [](GeneratorConfig& c, std::string_view v) { c.routing_skew = to_double("routing-skew", v); },
            [](const GeneratorConfig& c) { return from_double(c.routing_skew); }},
      STALLOC_U64_FIELD("iterations", iterations),
      STALLOC_U64_FIELD("seed", seed),
  };
  return table;
}

#undef STALLOC_U64_FIELD
#undef STALLOC_BOOL_FIELD

void require(bool ok, const std::string& what) {
  if (!ok) throw UsageError("invalid generator configuration: " + what);
}

std::string n(std::uint64_t v) { return std::to_string(v); }

}  // namespace

void set_config_field(GeneratorConfig& cfg, std::string_view key, std::string_view value) {
  std::string spelled(key);
  for (char& c : spelled) {
    if (c == '_') c = '-';
  }
  for (const Field& f : fields()) {
    if (spelled == f.name) {
      f.set(cfg, value);
      return;
    }
  }
  std::string known;
  for (const Field& f : fields()) {
    if (!known.empty()) known += ", ";
    known += f.name;
  }
  throw UsageError("unknown generator option --" + std::string(key) + " (known: " + known + ")");
}

std::vector<std::string> config_field_names() {
  std::vector<std::string> out;
  for (const Field& f : fields()) out.emplace_back(f.name);
  return out;
}

std::string describe_config(const GeneratorConfig& cfg) {
  static const GeneratorConfig defaults;
  std::string out = "name=" + cfg.name;
  for (const Field& f : fields()) {
    if (f.omit_default && f.get(cfg) == f.get(defaults)) continue;
    out += ' ';
    out += f.name;
    out += '=';
    out += f.get(cfg);
  }
  return out;
}

std::uint64_t microbatches_per_iteration(const GeneratorConfig& cfg) {
  if (cfg.micro_batch == 0 || cfg.dp == 0) return 0;
  return cfg.global_batch / (cfg.micro_batch * cfg.dp);
}

std::uint64_t sequence_granule(const GeneratorConfig& cfg) {
  const std::uint64_t split = cfg.sequence_parallel ? cfg.tp : 1;
  return cfg.cp > 1 ? 2 * cfg.cp * split : split;
}

void validate_config(const GeneratorConfig& cfg) {
  require(cfg.hidden > 0 && cfg.heads > 0 && cfg.layers > 0 && cfg.vocab > 0,
          "hidden, heads, layers and vocab must be positive");
  require(cfg.hidden % cfg.heads == 0, "hidden " + n(cfg.hidden) + " is not divisible by heads " + n(cfg.heads));
  require(cfg.kv_heads > 0 && cfg.heads % cfg.kv_heads == 0,
          "heads " + n(cfg.heads) + " is not a multiple of kv-heads " + n(cfg.kv_heads));
  require(cfg.dp > 0 && cfg.tp > 0 && cfg.pp > 0 && cfg.vpp > 0 && cfg.ep > 0 && cfg.cp > 0,
          "dp, tp, pp, vpp, ep and cp must be positive");
  if (cfg.cp > 1) {
    require(cfg.flash_attention, "context parallelism (cp " + n(cfg.cp) + ") needs flash attention");
    require(cfg.experts == 0, "context parallelism is modelled for dense models only");
  }
  require((cfg.doc_min == 0 && cfg.doc_max == 0) || (cfg.doc_min > 0 && cfg.doc_min <= cfg.doc_max),
          "doc-min " + n(cfg.doc_min) + " must be in 1..doc-max " + n(cfg.doc_max) + " (or both 0)");
  require(cfg.doc_max == 0 || cfg.flash_attention, "packed documents (doc-max) need flash attention");
  require(cfg.heads % cfg.tp == 0 && cfg.kv_heads % cfg.tp == 0,
          "heads " + n(cfg.heads) + " and kv-heads " + n(cfg.kv_heads) + " must be divisible by tp " + n(cfg.tp));
  require(cfg.vocab % cfg.tp == 0, "vocab " + n(cfg.vocab) + " is not divisible by tp " + n(cfg.tp));
  require(cfg.layers % (cfg.pp * cfg.vpp) == 0,
          "layers " + n(cfg.layers) + " is not divisible by pp*vpp = " + n(cfg.pp * cfg.vpp));
  require(cfg.pipeline_rank < cfg.pp, "pipeline-rank " + n(cfg.pipeline_rank) + " must be below pp " + n(cfg.pp));
  require((cfg.vpp > 1) == (cfg.schedule == PipelineScheduleKind::Interleaved),
          "--vpp " + n(cfg.vpp) + " needs --schedule " + (cfg.vpp > 1 ? "interleaved" : "1f1b"));
  require(cfg.micro_batch > 0, "micro-batch must be positive");
  require(cfg.global_batch % (cfg.micro_batch * cfg.dp) == 0 && cfg.global_batch > 0,
          "global-batch " + n(cfg.global_batch) + " is not a positive multiple of micro-batch*dp = " +
              n(cfg.micro_batch * cfg.dp));
  const std::uint64_t m = microbatches_per_iteration(cfg);
  if (cfg.vpp > 1) {
    require(m % cfg.pp == 0, "the interleaved schedule needs micro-batches per iteration (" + n(m) +
                                 ") to be a multiple of pp " + n(cfg.pp));
  }
  const std::uint64_t granule = sequence_granule(cfg);
  auto seq_ok = [&](std::uint64_t s) { return s > 0 && s % granule == 0; };
  const std::string seq_rule =
      cfg.cp > 1 ? " (positive, divisible by 2*cp" + std::string(cfg.sequence_parallel ? "*tp" : "") + " = " + n(granule) + ")"
      : cfg.sequence_parallel ? " (positive, divisible by tp under sequence parallelism)"
                              : " (positive)";
  if (!cfg.seq_list.empty()) {
    for (auto s : cfg.seq_list) require(seq_ok(s), "seq-list entry " + n(s) + seq_rule);
  } else if (cfg.seq_max > 0) {
    require(cfg.seq_min > 0 && cfg.seq_min <= cfg.seq_max,
            "seq-min " + n(cfg.seq_min) + " must be in 1..seq-max " + n(cfg.seq_max));
    require(seq_ok(cfg.seq_min) && seq_ok(cfg.seq_max), "seq-min/seq-max" + seq_rule);
  } else {
    require(seq_ok(cfg.seq_len), "seq-len " + n(cfg.seq_len) + seq_rule);
  }
  if (cfg.experts > 0) {
    require(cfg.expert_ffn > 0, "MoE needs expert-ffn");
    require(cfg.top_k > 0 && cfg.top_k <= cfg.experts, "top-k must be in 1..experts");
    require(cfg.experts % cfg.ep == 0, "experts " + n(cfg.experts) + " is not divisible by ep " + n(cfg.ep));
    require(cfg.dp % cfg.ep == 0, "ep " + n(cfg.ep) + " must divide dp " + n(cfg.dp));
    require(cfg.tp == 1, "MoE is modelled with tp 1 only (expert tensor parallelism is not)");
  } else {
    require(cfg.ffn > 0 && cfg.ffn % cfg.tp == 0, "ffn " + n(cfg.ffn) + " must be positive and divisible by tp");
  }
  require(cfg.iterations > 0, "iterations must be positive");
}

}  // namespace stalloc
