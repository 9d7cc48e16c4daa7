#pragma once

#include <string>
#include <utility>
#include <variant>

#include "common/check.h"

namespace di {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad user input (parameters, request fields)
  kNotFound,         // file / tensor / key missing
  kDataLoss,         // corrupt or truncated data
  kOutOfRange,       // length / capacity exceeded
  kFailedPrecondition,
  kResourceExhausted,
  kInternal,
};

const char* status_code_name(StatusCode code);

// A request-level outcome. Carried to the request it concerns; never thrown.
class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Value or Status (GCC 12 has no std::expected).
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    DI_CHECK(!std::get<Status>(v_).is_ok(), "Result constructed from an OK status");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    check_ok();
    return std::get<T>(v_);
  }
  const T& value() const& {
    check_ok();
    return std::get<T>(v_);
  }
  T&& value() && {
    check_ok();
    return std::get<T>(std::move(v_));
  }

 private:
  void check_ok() const {
    if (!is_ok()) throw Error(std::get<Status>(v_).to_string());
  }
  std::variant<T, Status> v_;
};

}  // namespace di
