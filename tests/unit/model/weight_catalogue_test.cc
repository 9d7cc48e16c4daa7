#include "model/weight_catalogue.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <set>

#include "config/model_config.h"
#include "model/layer_plan.h"

namespace di {
namespace {

std::string catalogue_repo_path(const std::string& rel) {
  return std::string(DI_SOURCE_DIR) + "/" + rel;
}

double gib(uint64_t b) {
  return static_cast<double>(b) / double(1ull << 30);
}
std::string gib2(uint64_t b) {
  return fmt::format("{:.2f}", gib(b));
}

class V41Catalogue : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cfg_ = new ModelConfig(load_model_config_file(catalogue_repo_path("configs/v41-flash.json")));
    cat_ = new WeightCatalogue(build_weight_catalogue(*cfg_));
  }
  static void TearDownTestSuite() {
    delete cat_;
    delete cfg_;
  }
  static ModelConfig* cfg_;
  static WeightCatalogue* cat_;
};
ModelConfig* V41Catalogue::cfg_ = nullptr;
WeightCatalogue* V41Catalogue::cat_ = nullptr;

// The release: 48 shards, 96,085 tensors, 475.24 GiB (delta spec §1.5 / §8, header audit).
TEST_F(V41Catalogue, ReproducesReleaseTensorCountAndBytes) {
  auto t = cat_->total();
  EXPECT_EQ(t.tensors, 96085u);
  EXPECT_EQ(gib2(t.bytes), "475.24");
}

TEST_F(V41Catalogue, ReproducesReleaseGroupTotals) {
  auto g = cat_->by_group();
  auto at = [&](WeightGroup w) { return g[static_cast<size_t>(w)]; };
  // Tensor counts and GiB per category, as the header audit of all 48 shards reports them.
  EXPECT_EQ(at(WeightGroup::kRoutedExperts).tensors, 94464u);
  EXPECT_EQ(gib2(at(WeightGroup::kRoutedExperts).bytes), "275.67");
  EXPECT_EQ(at(WeightGroup::kEngram).tensors, 12u);
  EXPECT_EQ(gib2(at(WeightGroup::kEngram).bytes), "189.13");
  EXPECT_EQ(at(WeightGroup::kAttention).tensors, 603u);
  EXPECT_EQ(gib2(at(WeightGroup::kAttention).bytes), "4.80");
  EXPECT_EQ(at(WeightGroup::kEmbedHead).tensors, 3u);
  EXPECT_EQ(gib2(at(WeightGroup::kEmbedHead).bytes), "2.47");
  EXPECT_EQ(at(WeightGroup::kSharedExperts).tensors, 240u);
  EXPECT_EQ(gib2(at(WeightGroup::kSharedExperts).bytes), "1.32");
  EXPECT_EQ(at(WeightGroup::kVision).tensors, 266u);
  EXPECT_EQ(gib2(at(WeightGroup::kVision).bytes), "0.90");
  EXPECT_EQ(at(WeightGroup::kDraft).tensors, 97u);
  EXPECT_EQ(gib2(at(WeightGroup::kDraft).bytes), "0.66");
  EXPECT_EQ(at(WeightGroup::kNormsRouter).tensors, 400u);
  EXPECT_EQ(gib2(at(WeightGroup::kNormsRouter).bytes), "0.29");
}

TEST_F(V41Catalogue, PerLayerTensorCountsMatchTheIndex) {
  auto blocks = cat_->by_block();
  ASSERT_EQ(blocks.size(), 43u);
  for (int64_t i = 0; i < 40; ++i) {
    uint64_t expected = 2334;
    if (i == 1) expected = 2340;                                    // + Engram
    if (i == 2 || i == 8) expected = 2342;                          // + Full
    if (i == 14) expected = 2348;                                   // + Full + Engram
    if (i == 20) expected = 2341;                                   // + Full without wgate
    if (i == 24 || i == 28 || i == 32 || i == 36) expected = 2337;  // + Reindex
    EXPECT_EQ(blocks[static_cast<size_t>(i)].tensors, expected) << "layer " << i;
  }
  EXPECT_EQ(blocks[40].tensors, 801u);  // mtp.0: + main_proj, main_norm
  EXPECT_EQ(blocks[41].tensors, 798u);
  EXPECT_EQ(blocks[42].tensors, 802u);  // mtp.2: + norm, markov head, confidence head
}

TEST_F(V41Catalogue, Has114DistinctNamePatterns) {
  std::set<std::string> patterns;
  const std::regex idx(R"((^layers\.|^mtp\.|\.experts\.|^vision\.blocks\.)\d+)");
  for (const auto& e : cat_->entries())
    patterns.insert(std::regex_replace(e.name, idx, "$1*"));
  EXPECT_EQ(patterns.size(), 114u);
}

TEST_F(V41Catalogue, Layer2ShapesAndDtypesMatchTheReleaseHeaders) {
  struct Row {
    const char* name;
    DType dtype;
    Shape shape;
  };
  const std::vector<Row> rows = {
      {"layers.2.attn.wq_a.weight", DType::kF8E4M3, {1280, 5120}},
      {"layers.2.attn.wq_a.scale", DType::kF8E8M0, {40, 160}},
      {"layers.2.attn.wq_b.weight", DType::kF8E4M3, {32768, 1280}},
      {"layers.2.attn.wq_b.scale", DType::kF8E8M0, {1024, 40}},
      {"layers.2.attn.wkv.scale", DType::kF8E8M0, {16, 160}},
      {"layers.2.attn.wo_a.weight", DType::kF8E4M3, {8192, 4096}},
      {"layers.2.attn.wo_a.scale", DType::kF8E8M0, {256, 128}},
      {"layers.2.attn.wo_b.weight", DType::kF8E4M3, {5120, 8192}},
      {"layers.2.attn.wo_b.scale", DType::kF8E8M0, {160, 256}},
      {"layers.2.attn.q_norm.weight", DType::kBF16, {1280}},
      {"layers.2.attn.attn_sink", DType::kF32, {64}},
      {"layers.2.attn.compressor.wgate.weight", DType::kBF16, {512, 5120}},
      {"layers.2.attn.indexer.wk.weight", DType::kBF16, {128, 512}},
      {"layers.2.attn.indexer.weights_proj.weight", DType::kBF16, {32, 5120}},
      {"layers.2.attn.indexer.wq_b.weight", DType::kF8E4M3, {4096, 1280}},
      {"layers.2.attn.indexer.wq_b.scale", DType::kF8E8M0, {128, 40}},
      {"layers.2.ffn.gate.weight", DType::kBF16, {384, 5120}},
      {"layers.2.ffn.gate.bias_vl", DType::kF32, {384}},
      {"layers.2.ffn.experts.0.w1.weight", DType::kI8, {2304, 2560}},
      {"layers.2.ffn.experts.0.w1.scale", DType::kF8E8M0, {2304, 160}},
      {"layers.2.ffn.experts.383.w2.weight", DType::kI8, {5120, 1152}},
      {"layers.2.ffn.experts.383.w2.scale", DType::kF8E8M0, {5120, 72}},
      {"layers.2.ffn.shared_experts.w1.scale", DType::kF8E8M0, {72, 160}},
      {"layers.2.ffn.shared_experts.w2.weight", DType::kF8E4M3, {5120, 2304}},
      {"layers.2.hc_attn_fn", DType::kF32, {24, 20480}},
      {"layers.2.hc_attn_scale", DType::kF32, {3}},
      {"layers.14.engram.embed.weight", DType::kF8E4M3, {384016682, 256}},
      {"layers.14.engram.embed.scale", DType::kF8E8M0, {384016682, 8}},
      {"layers.1.engram.wkv.weight", DType::kF8E4M3, {25600, 6144}},
      {"layers.1.engram.wkv.scale", DType::kF8E8M0, {800, 192}},
      {"layers.1.engram.q_weight", DType::kBF16, {4, 5120}},
      {"mtp.0.main_proj.weight", DType::kF8E4M3, {5120, 15360}},
      {"mtp.0.main_proj.scale", DType::kF8E8M0, {160, 480}},
      {"mtp.2.markov_head.embed.weight", DType::kBF16, {129280, 256}},
      {"mtp.2.confidence_head.proj.weight", DType::kBF16, {1, 5376}},
      {"mtp.1.ffn.experts.127.w3.weight", DType::kI8, {2304, 2560}},
      {"embed.weight", DType::kBF16, {129280, 5120}},
      {"vision.patch_embed.proj.weight", DType::kBF16, {1024, 588}},
      {"vision.blocks.31.mlp.w1.weight", DType::kBF16, {5632, 1024}},
      {"aligner.w1.weight", DType::kBF16, {5120, 9216}},
      {"image_newline", DType::kBF16, {5120}},
  };
  for (const auto& r : rows) {
    const WeightSpec* s = cat_->find(r.name);
    ASSERT_NE(s, nullptr) << r.name;
    EXPECT_EQ(s->dtype, r.dtype) << r.name;
    EXPECT_EQ(s->shape, r.shape) << r.name;
  }
  // Absent by design.
  for (const char* absent :
       {"layers.20.attn.compressor.wgate.weight", "layers.24.attn.indexer.wk.weight",
        "layers.3.attn.compressor.wkv.weight", "hc_head_fn", "layers.0.ffn.gate.tid2eid",
        "mtp.0.norm.weight", "mtp.1.main_proj.weight", "layers.2.engram.q_weight"}) {
    EXPECT_EQ(cat_->find(absent), nullptr) << absent;
  }
}

TEST_F(V41Catalogue, LayerPlanRoles) {
  const auto& plan = cat_->plan();
  EXPECT_EQ(plan[0].mode, AttnMode::kWindow);
  EXPECT_EQ(plan[1].engram_slot, 0);
  EXPECT_EQ(plan[2].mode, AttnMode::kFull);
  EXPECT_EQ(plan[7].mode, AttnMode::kReuse);
  EXPECT_EQ(plan[7].kv_source, 2);
  EXPECT_EQ(plan[14].engram_slot, 1);
  EXPECT_TRUE(plan[20].candidate_builder);
  EXPECT_EQ(plan[24].mode, AttnMode::kReindex);
  EXPECT_TRUE(plan[24].candidate_reader);
  EXPECT_EQ(plan[24].kv_source, 20);
  EXPECT_EQ(plan[25].mode, AttnMode::kReuse);
  EXPECT_EQ(plan[25].index_source, 24);
  EXPECT_FALSE(plan[25].candidate_reader);
  EXPECT_EQ(plan[39].index_source, 36);
  EXPECT_EQ(plan[40].prefix, "mtp.0.");
  EXPECT_EQ(plan[40].n_routed_experts, 128);
  EXPECT_EQ(plan[42].num_experts_per_tok, 3);
  EXPECT_EQ(plan[42].mode, AttnMode::kWindow);
}

TEST(V4Catalogue, ReproducesTheV4FlashTensorInventory) {
  ModelConfig cfg = load_model_config_file(catalogue_repo_path("configs/v4-flash.json"));
  WeightCatalogue cat = build_weight_catalogue(cfg);
  EXPECT_EQ(cat.total().tensors, 69187u);  // deepseek-v4-spec §5
  auto blocks = cat.by_block();
  ASSERT_EQ(blocks.size(), 44u);
  EXPECT_EQ(blocks[0].tensors, 1565u);   // SWA, hash-routed
  EXPECT_EQ(blocks[2].tensors, 1576u);   // CSA, hash-routed
  EXPECT_EQ(blocks[3].tensors, 1569u);   // HCA
  EXPECT_EQ(blocks[42].tensors, 1576u);  // CSA
  EXPECT_EQ(blocks[43].tensors, 1575u);  // MTP
  const WeightSpec* tid = cat.find("layers.2.ffn.gate.tid2eid");
  ASSERT_NE(tid, nullptr);
  EXPECT_EQ(tid->shape, (Shape{129280, 6}));
  EXPECT_EQ(cat.find("layers.3.ffn.gate.tid2eid"), nullptr);
  EXPECT_NE(cat.find("layers.3.ffn.gate.bias"), nullptr);
  EXPECT_EQ(cat.find("layers.2.attn.compressor.ape")->shape, (Shape{4, 1024}));
  EXPECT_EQ(cat.find("layers.3.attn.compressor.ape")->shape, (Shape{128, 512}));
  EXPECT_EQ(cat.find("layers.2.attn.wq_b.scale")->shape, (Shape{256, 8}));
  EXPECT_EQ(cat.find("layers.5.ffn.experts.0.w1.scale")->shape, (Shape{2048, 128}));
  EXPECT_EQ(cat.find("mtp.0.e_proj.scale")->shape, (Shape{32, 32}));
  EXPECT_NE(cat.find("hc_head_fn"), nullptr);
  EXPECT_EQ(cat.find("layers.0.ffn.gate.bias_vl"), nullptr);
  // 284.3B excluding MTP, 290.9B including (spec §1, derived).
  EXPECT_NEAR(static_cast<double>(cat.total().params) / 1e9, 290.9, 0.05);
}

TEST(Catalogue, ParamsCountFp4AsTwoPerByteAndScalesAsNone) {
  ModelConfig cfg = load_model_config_file(catalogue_repo_path("configs/v41-flash.json"));
  WeightCatalogue cat = build_weight_catalogue(cfg);
  const WeightSpec* w = cat.find("layers.0.ffn.experts.0.w1.weight");
  const WeightSpec* s = cat.find("layers.0.ffn.experts.0.w1.scale");
  EXPECT_TRUE(w->fp4_packed);
  EXPECT_EQ(w->params(), 2304u * 5120u);
  EXPECT_EQ(s->params(), 0u);
  // Total ≈ 763B (552B backbone + 196B Engram + vision + DSpark), delta spec §1.5.
  EXPECT_NEAR(static_cast<double>(cat.total().params) / 1e9, 763.2, 0.1);
}

}  // namespace
}  // namespace di
