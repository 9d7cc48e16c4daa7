#pragma once

// Internal to the fixture replay (model/fixture_replay.cc, model/fixture_runner.cc): tensor
// slicing helpers and running one case through a model. Not part of the public API.

#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/check.h"
#include "model/fixture_replay.h"

namespace di::fixture_detail {

using RoleTensors = std::map<std::string, FixtureTensor>;  // role name -> tensor

inline bool is_id_field(const std::string& field) {
  return field == "ids" || field == "dspark_input_ids" || field == "dspark_draft_ids";
}

inline bool is_dspark_field(const std::string& field) {
  return field.rfind("dspark_", 0) == 0;
}

// Offset of the sub-tensor at the leading indices `lead` and its element count.
inline std::pair<size_t, size_t> slice(const FixtureTensor& t,
                                       std::initializer_list<int64_t> lead) {
  DI_CHECK(lead.size() <= t.shape.size(), "tensor '{}': {} indices for rank {}", t.key, lead.size(),
           t.shape.size());
  int64_t off = 0;
  size_t dim = 0;
  for (int64_t i : lead) {
    DI_CHECK(i >= 0 && i < t.shape[dim], "tensor '{}': index {} out of range {} in dim {}", t.key,
             i, t.shape[dim], dim);
    off = off * t.shape[dim] + i;
    ++dim;
  }
  int64_t len = 1;
  for (size_t d = dim; d < t.shape.size(); ++d)
    len *= t.shape[d];
  return {static_cast<size_t>(off * len), static_cast<size_t>(len)};
}

inline std::span<double> values_at(FixtureTensor& t, std::initializer_list<int64_t> lead) {
  auto [off, len] = slice(t, lead);
  return std::span<double>(t.values).subspan(off, len);
}
inline std::span<const double> values_at(const FixtureTensor& t,
                                         std::initializer_list<int64_t> lead) {
  auto [off, len] = slice(t, lead);
  return std::span<const double>(t.values).subspan(off, len);
}
inline std::span<int64_t> ids_at(FixtureTensor& t, std::initializer_list<int64_t> lead) {
  auto [off, len] = slice(t, lead);
  return std::span<int64_t>(t.ids).subspan(off, len);
}
inline std::span<const int64_t> ids_at(const FixtureTensor& t,
                                       std::initializer_list<int64_t> lead) {
  auto [off, len] = slice(t, lead);
  return std::span<const int64_t>(t.ids).subspan(off, len);
}

// Which expected role each input tensor of a prefill case produces: the role of the same name
// (decode_equiv: "L14" -> "L14"), or the single "logits" role of a single-input case.
std::vector<std::pair<std::string, std::string>> prefill_pairs(
    const FixtureCase& c, const std::vector<ExpectedRole>& roles);

// An error the model raised while running a case (as opposed to a malformed fixture): the replay
// fails that case alone and goes on with the others.
class BackendError : public Error {
 public:
  using Error::Error;
};

// Runs case `c` through `model` for one precision and index-key behaviour: the engine's tensors
// by expected role; progress and failures go to `report`. Throws di::Error on a malformed case
// and BackendError when the model itself fails.
RoleTensors run_case(ForwardModel& model, const FixtureCase& c, const FixtureTensors& tensors,
                     const std::string& precision, const std::string& behaviour,
                     CaseReport& report);

}  // namespace di::fixture_detail
