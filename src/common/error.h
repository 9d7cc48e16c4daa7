#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace di {

// The one exception type of the project. Thrown by DI_CHECK for programmer errors and by loaders
// for bad input; the message always names the file/field/tensor involved. Request-level problems
// use Status instead (status.h).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what), message_(what) {}
  // `what` carries the developer's location; `message` is the text alone, for per-request
  // errors shown to users.
  Error(const std::string& what, std::string message)
      : std::runtime_error(what), message_(std::move(message)) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

}  // namespace di
