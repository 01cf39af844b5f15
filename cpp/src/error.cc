#include "neurenix/error.h"

namespace neurenix {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kShapeMismatch: return "shape_mismatch";
    case ErrorCode::kOutOfMemory: return "out_of_memory";
    case ErrorCode::kDeviceUnavailable: return "device_unavailable";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kInvalidState: return "invalid_state";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kFloatingPoint: return "floating_point";
  }
  return "internal";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string("[") + error_code_name(code) + "] " + message),
      code_(code),
      message_(message) {}

void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

}  // namespace neurenix
