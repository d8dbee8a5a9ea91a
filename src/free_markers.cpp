#include "src/free_markers.h"

namespace stalloc {

FreeMarkers::~FreeMarkers() {
  for (Marker& marker : markers_) sync_.discard(&marker.events);
}

std::uint32_t FreeMarkers::take(StreamMask users) {
  if (users == 0) return kNone;
  if (open_ == kNone) {
    if (free_.empty()) {
      open_ = static_cast<std::uint32_t>(markers_.size());
      markers_.emplace_back();
    } else {
      open_ = free_.back();
      free_.pop_back();
    }
    markers_[open_] = Marker{};
  }
  markers_[open_].users |= users;
  ++markers_[open_].holders;
  return open_;
}

void FreeMarkers::add_holder(std::uint32_t marker) {
  if (marker != kNone) ++markers_[marker].holders;
}

void FreeMarkers::end_free(std::uint32_t marker) {
  if (marker != kNone && marker == open_ && ++markers_[marker].frees >= kFreesPerMarker) {
    record(marker);
  }
}

void FreeMarkers::record(std::uint32_t m) {
  if (m == open_) open_ = kNone;
  Marker& marker = markers_[m];
  marker.recorded = true;
  if (!sync_.record(marker.users, &marker.events)) {
    sync_.discard(&marker.events);
    marker.failed = true;
  }
}

bool FreeMarkers::done(std::uint32_t m) {
  if (!markers_[m].recorded) record(m);
  Marker& marker = markers_[m];
  if (!marker.done && !marker.failed && sync_.completed(&marker.events)) marker.done = true;
  return marker.done;
}

void FreeMarkers::release(std::uint32_t m) {
  if (m == kNone) return;
  Marker& marker = markers_[m];
  if (--marker.holders > 0) return;
  sync_.discard(&marker.events);
  if (m == open_) open_ = kNone;
  free_.push_back(m);
}

}  // namespace stalloc
