#pragma once

// The golden-fixture index (cases.json) and its tensors (cases.safetensors), typed. Format:
// ../shared/fixtures/README.md §3.5 (cases), §4 (case kinds), §6.4 (margin tables).
// Everything is driven from cases.json: case names, lengths and keys are never assumed.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace di {

class SafetensorsFile;

// The case kinds README §4 defines (cases.json "kind").
enum class FixtureCaseKind {
  kPrefill,                   // one-shot prefill(s) of input tensors; expected = last-row logits
  kPrefillThenDecode,         // prefill prompt_ids, teacher-forced steps with step_ids (+ DSpark)
  kPrefillThenDecodeBatched,  // the same with several rows in one forward
  kGreedyGeneration,          // prefill prompt_ids, then argmax generation (+ DSpark)
};

const char* fixture_case_kind_name(FixtureCaseKind kind);

// One expected role of a case in one precision, e.g. "logits_shipped" -> field "logits",
// behaviour "shipped"; "prefill_logits" -> field "prefill_logits", no behaviour.
struct ExpectedRole {
  std::string role;       // the key of cases.json expected[prec]
  std::string field;      // role without the behaviour suffix
  std::string behaviour;  // "" when the role applies to every behaviour
  std::string key;        // tensor key in cases.safetensors
};

struct FixtureCase {
  std::string name;
  std::string kind_name;  // as written in cases.json
  FixtureCaseKind kind = FixtureCaseKind::kPrefill;
  std::string description;
  std::map<std::string, std::string> inputs;                  // role -> key
  std::map<std::string, std::vector<ExpectedRole>> expected;  // precision -> roles
  std::map<std::string, std::vector<int64_t>> shapes;         // key -> shape
  std::optional<std::string> dspark_logit_steps_key;          // I64 [S] when present

  // The roles of `precision` that apply under `behaviour` (suffix-less roles always apply).
  // Throws di::Error when the case has no such precision.
  std::vector<ExpectedRole> roles_for(const std::string& precision,
                                      const std::string& behaviour) const;
  // The role with `field` among roles_for(precision, behaviour), or nullptr.
  const ExpectedRole* find_role(const std::string& precision, const std::string& behaviour,
                                const std::string& field) const;
  // The shape cases.json records for `key`; throws di::Error naming case and key when absent.
  const std::vector<int64_t>& shape_of(const std::string& key) const;
};

// One top-k or quantisation margin series (cases.json topk_margins / quant_margins): the
// smallest margin of the prefill (one-shot) forward and of each decode step, and for the
// quantisation table the number of events below 1e-6. null entries are absent values.
struct MarginSeries {
  std::optional<double> prefill;
  std::vector<std::optional<double>> steps;
  std::optional<int64_t> prefill_n_below;             // quant tables only
  std::vector<std::optional<int64_t>> steps_n_below;  // quant tables only
};

// label ("decode:intended", "prefill.L17", "decode_equiv.L14", ...) -> site ("router",
// "indexer", "elem", "dspark_scale", ...) -> series.
using MarginTable = std::map<std::string, std::map<std::string, MarginSeries>>;

struct FixtureMargins {
  std::map<std::string, MarginTable> topk;   // precision -> table
  std::map<std::string, MarginTable> quant;  // precision -> table (format 2: fp64 only)
};

// One forward of a case, as the margin tables index it: the prefill (or one-shot) forward, or
// decode step `step` (for greedy generation: the forward that produced ids[:, step]).
struct MarginForward {
  bool prefill = true;
  int64_t step = 0;
};

struct NearTieThresholds {
  double quant = 1e-6;  // relative distance of an FP8/FP4 rounding from its boundary
  double topk = 1e-4;   // absolute gap at a top-k boundary
};

// The near-ties recorded at one forward for the first matching label, as readable strings
// ("quant fp64 decode:intended elem step 3: 2 events < 1e-6, min 4.6e-09"). Sites whose name
// starts with "dspark" are included only when `include_dspark`. Top-k tables of every
// precision in `topk_precisions` are consulted. Empty when there is none (or no label matches;
// then `*label_found` is false).
std::vector<std::string> find_near_ties(const FixtureMargins& margins,
                                        const std::vector<std::string>& labels,
                                        const std::vector<std::string>& topk_precisions,
                                        MarginForward forward, bool include_dspark,
                                        const NearTieThresholds& thresholds, bool* label_found);

struct FixtureIndex {
  std::filesystem::path dir;
  std::filesystem::path json_path;
  std::string fixture;
  int64_t format_version = 0;
  std::vector<std::string> precisions;  // keys of "precisions"
  std::vector<std::string> behaviours;  // keys of "behaviours" that name a behaviour
  std::vector<FixtureCase> cases;
  FixtureMargins margins;
};

// Parses <dir>/cases.json. Throws di::Error naming the file and the offending field.
FixtureIndex load_fixture_index(const std::filesystem::path& dir);

// A decoded tensor of cases.safetensors: F64/F32 -> `values`, I64 -> `ids`.
struct FixtureTensor {
  std::string key;
  DType dtype = DType::kF64;
  std::vector<int64_t> shape;
  std::vector<double> values;
  std::vector<int64_t> ids;

  bool is_ids() const { return dtype == DType::kI64; }
  int64_t numel() const;
  // Elements per leading index (product of shape[1:]); numel() for rank 0.
  int64_t row_stride() const;
};

// <dir>/cases.safetensors, with typed loading and checks against cases.json shapes.
class FixtureTensors {
 public:
  explicit FixtureTensors(const std::filesystem::path& path);  // throws di::Error naming it
  ~FixtureTensors();
  FixtureTensors(FixtureTensors&&) noexcept;
  FixtureTensors& operator=(FixtureTensors&&) noexcept;

  bool contains(const std::string& key) const;
  // Loads `key` (F64, F32 or I64). When `expected_shape` is given, the stored shape must equal
  // it. Throws di::Error naming file and key for a missing key, another dtype or a shape
  // mismatch.
  FixtureTensor load(const std::string& key,
                     const std::vector<int64_t>* expected_shape = nullptr) const;
  // load() of an I64 tensor of rank `rank` (input ids [B, L], logit steps [S]).
  FixtureTensor load_ids(const std::string& key, size_t rank,
                         const std::vector<int64_t>* expected_shape = nullptr) const;
  const std::string& path() const;

 private:
  std::unique_ptr<SafetensorsFile> file_;
};

}  // namespace di
