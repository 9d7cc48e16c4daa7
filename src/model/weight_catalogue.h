#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "config/model_config.h"
#include "core/shape.h"
#include "model/layer_plan.h"

namespace di {

// Parameter groups used for accounting (inspect, EP memory). The split follows the public header
// audit of the V4.1 release: `attention` = attn.* and attn_norm; `norms_router` = hc_* mixes,
// ffn_norm and the router gate; `draft` = every non-routed-expert tensor of mtp.*; routed experts
// of all blocks (draft included) are `routed_experts`.
enum class WeightGroup : uint8_t {
  kAttention,
  kRoutedExperts,
  kSharedExperts,
  kNormsRouter,
  kEmbedHead,
  kEngram,
  kDraft,
  kVision,
};
inline constexpr int kNumWeightGroups = 8;
std::string_view weight_group_name(WeightGroup g);

struct WeightSpec {
  std::string name;
  DType dtype = DType::kBF16;
  Shape shape;
  WeightGroup group = WeightGroup::kAttention;
  int64_t block = -1;       // block index (LayerPlan::index), -1 for global tensors
  int64_t expert = -1;      // routed expert id, -1 otherwise
  bool is_scale = false;    // E8M0 block scales of a quantized weight
  bool fp4_packed = false;  // I8 bytes holding two e2m1 values each

  uint64_t nbytes() const { return static_cast<uint64_t>(shape.numel()) * dtype_size(dtype); }
  // Logical parameters: 0 for scales, 2 per byte for packed FP4, else elements.
  uint64_t params() const {
    if (is_scale) return 0;
    auto n = static_cast<uint64_t>(shape.numel());
    return fp4_packed ? 2 * n : n;
  }
};

// The exact list of tensors a checkpoint of this config must contain.
class WeightCatalogue {
 public:
  WeightCatalogue(const ModelConfig& cfg, std::vector<LayerPlan> plan);

  const std::vector<WeightSpec>& entries() const { return entries_; }
  const std::vector<LayerPlan>& plan() const { return plan_; }
  size_t size() const { return entries_.size(); }
  const WeightSpec* find(std::string_view name) const;

  struct Totals {
    uint64_t tensors = 0;
    uint64_t bytes = 0;
    uint64_t params = 0;
  };
  Totals total() const;
  std::array<Totals, kNumWeightGroups> by_group() const;
  std::map<DType, Totals> by_dtype() const;
  // Per block (index = LayerPlan::index); global tensors are not included.
  std::vector<Totals> by_block() const;

 private:
  std::vector<WeightSpec> entries_;
  std::vector<LayerPlan> plan_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

WeightCatalogue build_weight_catalogue(const ModelConfig& cfg);

}  // namespace di
