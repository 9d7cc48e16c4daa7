#pragma once

// Named intermediates of the forward pass (house rule 6): a model with a tracer installed
// reports each intermediate under a stable name ("layer.3.attn.q", "final.logits", ...) so that
// CPU and CUDA runs, and the reference's layer trace (fixtures TRACE.md), can be diffed by name.
// With no tracer installed the model only tests a null pointer.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/dtype.h"

namespace di {

// Receives the intermediates of forward passes. Shapes drop the batch dimension (one sequence
// at a time), as the reference trace does.
class ForwardTracer {
 public:
  virtual ~ForwardTracer() = default;
  // A floating-point intermediate, widened to double (row-major, `shape`).
  virtual void record(std::string_view name, std::span<const double> values,
                      std::vector<int64_t> shape) = 0;
  // An integer intermediate: ids, indices, masks.
  virtual void record_ids(std::string_view name, std::span<const int64_t> values,
                          std::vector<int64_t> shape) = 0;
  // A batched forward announces each sequence's chunk before tracing it (index < count).
  virtual void begin_chunk(size_t index, size_t count) {
    (void)index;
    (void)count;
  }
};

// One collected intermediate: `values` for floats, `ids` for integers.
struct TraceTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool is_ids = false;
  std::vector<double> values;
  std::vector<int64_t> ids;
  int64_t numel() const;
};

// Collects intermediates in recording (= computation) order under the current run's prefix:
// a name becomes "<run>.<name>", or "<run>.seq<b>.<name>" for chunk b of a batched forward.
// A name recorded twice is a programmer error (set a new run between forwards).
class TraceRecorder final : public ForwardTracer {
 public:
  void set_run(std::string run);  // "" = no prefix
  void record(std::string_view name, std::span<const double> values,
              std::vector<int64_t> shape) override;
  void record_ids(std::string_view name, std::span<const int64_t> values,
                  std::vector<int64_t> shape) override;
  void begin_chunk(size_t index, size_t count) override;

  const std::vector<TraceTensor>& tensors() const { return tensors_; }
  const TraceTensor* find(std::string_view full_name) const;  // nullptr when absent
  void clear();
  // Writes every tensor in recording order: floats as `float_dtype` (kF32 or kF64), ids as I64.
  void write_safetensors(const std::filesystem::path& path, DType float_dtype) const;

 private:
  TraceTensor& add(std::string_view name, std::vector<int64_t> shape, size_t numel);
  std::string run_;
  std::string prefix_;
  std::vector<TraceTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// Per-name comparison of an engine trace with a reference trace file.
struct TraceDiffEntry {
  std::string name;
  bool is_ids = false;
  bool shape_ok = true;
  // Floats: max |Δ| / std(ref) over the finite reference values (equal infinities agree; an
  // infinity or NaN on one side only is +inf). `rel` rounds the engine to the reference file's
  // storage dtype first (a float64 engine against a float32 trace: 0 when they agree to the
  // storage precision); `raw_rel` uses the engine's values as they are.
  double rel = 0;
  double raw_rel = 0;
  int64_t mismatches = 0;  // ids: differing elements
  bool pass = true;
};

struct TraceDiff {
  std::vector<TraceDiffEntry> entries;      // names in both, in the engine's recording order
  std::vector<std::string> engine_only;     // names the reference does not hold
  std::vector<std::string> reference_only;  // names the engine did not produce
  std::optional<size_t> first_failure;      // index into entries
  double max_rel = 0;                       // largest float rel, and where
  std::string max_rel_at;
  double max_raw_rel = 0;  // largest float raw_rel, and where
  std::string max_raw_rel_at;
  int64_t failures = 0;
};

// Compares every engine tensor with the same-named tensor of `reference` (a safetensors file of
// F32/F64/I64 tensors). A float entry passes when rel <= rel_threshold; ids must be equal.
// Reference names outside `reference_prefixes` (when non-empty) are not listed as missing.
// Throws di::Error for an unreadable file or an unsupported reference dtype.
TraceDiff compare_trace(const TraceRecorder& engine, const std::filesystem::path& reference,
                        double rel_threshold,
                        const std::vector<std::string>& reference_prefixes = {});

}  // namespace di
