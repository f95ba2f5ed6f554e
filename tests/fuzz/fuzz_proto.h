// Protobuf's own log lines (one per string field with invalid UTF-8 that a
// mutated input carries) would be most of a fuzz run's output and time;
// the targets that parse protos call quiet_protobuf() once.
#pragma once

#include "google/protobuf/stubs/logging.h"

namespace strata::fuzz {

inline void quiet_protobuf() {
  static const bool done = [] {
    google::protobuf::SetLogHandler(nullptr);  // discards
    return true;
  }();
  (void)done;
}

}  // namespace strata::fuzz
