// MiniMalloc's CSV format for offset problems and their solutions:
//   id,lower,upper,size            (a problem; the header line is required)
//   id,lower,upper,size,offset     (a solution)
#pragma once

#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "planner/dsa/dsa.h"

namespace stalloc {

struct DsaCsv {
  std::vector<DsaBuffer> buffers;
  // Present when the file has the offset column: one per buffer.
  std::optional<std::vector<std::uint64_t>> offsets;
};

// Throws ParseError(file, line, what was expected) on a missing header or column, a
// non-number, lower >= upper, size 0 or a duplicate id. `name` is the file name for messages.
DsaCsv read_dsa_csv(std::istream& in, const std::string& name);
DsaCsv read_dsa_csv_file(const std::string& path);

// With offsets empty, the problem alone (4 columns); else one offset per buffer.
void write_dsa_csv(std::ostream& out, const std::vector<DsaBuffer>& buffers,
                   const std::vector<std::uint64_t>& offsets);
void write_dsa_csv_file(const std::string& path, const std::vector<DsaBuffer>& buffers,
                        const std::vector<std::uint64_t>& offsets);

}  // namespace stalloc
