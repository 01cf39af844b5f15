// Error spine of the C++ core.
//
// Every failure leaves the core as an `neurenix::Error` carrying an `ErrorCode`
// and a message; `what()` shows both ("[out_of_memory] ..."). The cxx bridge
// (rust/neurenix-sys) passes the code and the message to Rust separately,
// where each code becomes one variant of the core's error enum.
#pragma once

#include <stdexcept>
#include <string>

namespace neurenix {

enum class ErrorCode : uint8_t {
  kInvalidArgument,    // a caller passed something malformed (option, shape, spec)
  kShapeMismatch,      // tensor shapes or dtypes do not agree
  kOutOfMemory,        // a tile overflowed at compile time
  kDeviceUnavailable,  // IPUs are attached elsewhere
  kUnsupported,        // the core has no implementation for the request
  kInvalidState,       // call made in the wrong state (e.g. detached device)
  kInternal,           // a bug: an invariant of the core was violated
  kFloatingPoint,      // a floating-point exception on the device (when enabled)
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const { return code_; }
  // The message without the "[code] " prefix.
  const std::string& message() const { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

[[noreturn]] void fail(ErrorCode code, const std::string& message);

// Checks an internal invariant; failing it is a bug in the core, never a user error.
#define NX_CHECK(cond, msg)                                                  \
  do {                                                                       \
    if (!(cond)) ::neurenix::fail(::neurenix::ErrorCode::kInternal,          \
                                  std::string(__FILE__) + ":" +              \
                                      std::to_string(__LINE__) + ": " + (msg)); \
  } while (0)

}  // namespace neurenix
