#include "planner/dsa/dsa_csv.h"

#include <fstream>
#include <string_view>
#include <unordered_set>

#include "common/error.h"
#include "common/units.h"

namespace stalloc {

namespace {

std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = line.find(',', begin);
    std::string_view field =
        line.substr(begin, comma == std::string_view::npos ? line.npos : comma - begin);
    while (!field.empty() && (field.front() == ' ' || field.front() == '\t'))
      field.remove_prefix(1);
    while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) field.remove_suffix(1);
    fields.push_back(field);
    if (comma == std::string_view::npos) break;
    begin = comma + 1;
  }
  return fields;
}

}  // namespace

DsaCsv read_dsa_csv(std::istream& in, const std::string& name) {
  static const char* const kColumns[] = {"id", "lower", "upper", "size", "offset"};
  DsaCsv csv;
  std::string line;
  std::size_t line_number = 0;
  std::size_t columns = 0;
  std::unordered_set<std::uint64_t> ids;
  std::vector<std::uint64_t> offsets;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const auto fields = split_fields(line);
    if (columns == 0) {
      if (fields.size() != 4 && fields.size() != 5) {
        throw ParseError(
            name, line_number,
            "expected the header 'id,lower,upper,size' or 'id,lower,upper,size,offset'");
      }
      for (std::size_t k = 0; k < fields.size(); ++k) {
        if (fields[k] != kColumns[k]) {
          throw ParseError(name, line_number,
                           "expected header column '" + std::string(kColumns[k]) + "', got '" +
                               std::string(fields[k]) + "'");
        }
      }
      columns = fields.size();
      continue;
    }
    if (fields.size() != columns) {
      throw ParseError(name, line_number,
                       "expected " + std::to_string(columns) + " comma-separated columns, got " +
                           std::to_string(fields.size()));
    }
    std::uint64_t values[5] = {};
    for (std::size_t k = 0; k < columns; ++k) {
      const auto value = parse_u64(fields[k]);
      if (!value) {
        throw ParseError(name, line_number,
                         "expected a non-negative integer for '" + std::string(kColumns[k]) +
                             "', got '" + std::string(fields[k]) + "'");
      }
      values[k] = *value;
    }
    DsaBuffer b;
    b.id = values[0];
    b.lower = values[1];
    b.upper = values[2];
    b.size = values[3];
    if (b.lower >= b.upper) {
      throw ParseError(name, line_number,
                       "expected lower < upper, got lower " + std::to_string(b.lower) +
                           " and upper " + std::to_string(b.upper));
    }
    if (b.size == 0) throw ParseError(name, line_number, "expected a size above 0");
    if (!ids.insert(b.id).second) {
      throw ParseError(name, line_number, "duplicate id " + std::to_string(b.id));
    }
    csv.buffers.push_back(b);
    if (columns == 5) offsets.push_back(values[4]);
  }
  if (columns == 0)
    throw ParseError(name, line_number + 1, "expected the header 'id,lower,upper,size'");
  if (columns == 5) csv.offsets = std::move(offsets);
  return csv;
}

DsaCsv read_dsa_csv_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot open " + path);
  return read_dsa_csv(in, path);
}

void write_dsa_csv(std::ostream& out, const std::vector<DsaBuffer>& buffers,
                   const std::vector<std::uint64_t>& offsets) {
  const bool with_offsets = !offsets.empty();
  out << (with_offsets ? "id,lower,upper,size,offset\n" : "id,lower,upper,size\n");
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const DsaBuffer& b = buffers[i];
    out << b.id << ',' << b.lower << ',' << b.upper << ',' << b.size;
    if (with_offsets) out << ',' << offsets[i];
    out << '\n';
  }
}

void write_dsa_csv_file(const std::string& path, const std::vector<DsaBuffer>& buffers,
                        const std::vector<std::uint64_t>& offsets) {
  std::ofstream out(path);
  if (!out) throw UsageError("cannot write " + path);
  write_dsa_csv(out, buffers, offsets);
  out.flush();
  if (!out) throw UsageError("error while writing " + path);
}

}  // namespace stalloc
