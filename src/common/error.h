#pragma once

#include <stdexcept>
#include <string>

namespace di {

// The one exception type of the project. Thrown by DI_CHECK for programmer errors and by loaders
// for bad input; the message always names the file/field/tensor involved. Request-level problems
// use Status instead (status.h).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace di
