#include "src/reclaimer.h"

namespace stalloc {

Reclaimer& no_reclaimer() {
  static NoReclaimer none;
  return none;
}

}  // namespace stalloc
