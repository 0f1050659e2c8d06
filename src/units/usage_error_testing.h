// Test support: what a call said when it refused its input.
#pragma once

#include <functional>
#include <string>

#include "units/units.h"

namespace weft::test_support {

// The message of the UsageError `call` throws, or "no error" if it throws none.
inline std::string usage_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace weft::test_support
