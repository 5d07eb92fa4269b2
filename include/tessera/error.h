// tessera: the one error type every public function throws.
#pragma once

#include <stdexcept>
#include <string>

namespace tessera {

enum class ErrorCode {
  invalid_argument,     // an argument breaks a documented rule (shape, dtype, stride, range)
  unsupported,          // valid, but no backend implements this combination
  workspace_too_small,  // caller-provided workspace is smaller than required
  plan_mismatch,        // run() called with arguments that differ from its plan()
  backend_failure,      // the device runtime reported an error (CUDA error string attached)
  out_of_memory,        // an allocation failed
};

const char* error_code_name(ErrorCode code) noexcept;

// Carries a code, the offending argument's name and a full message of the form
// "<argument>: expected <expectation>, got <value>".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string argument, const std::string& message)
      : std::runtime_error(message), code_(code), argument_(std::move(argument)) {}

  ErrorCode code() const noexcept { return code_; }
  // Name of the argument at fault ("q", "kv_indptr[3]", ...); empty when none applies.
  const std::string& argument() const noexcept { return argument_; }

 private:
  ErrorCode code_;
  std::string argument_;
};

}  // namespace tessera
