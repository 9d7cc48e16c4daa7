#include "model/synth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/fp8.h"
#include "config/engram_params.h"
#include "loader/checkpoint.h"
#include "model/catalogue_check.h"
#include "model/layer_plan.h"
#include "model/weight_catalogue.h"
#include "tests_support/temp_dir.h"

namespace di {
namespace {

using nlohmann::json;

std::string repo(const std::string& rel) {
  return std::string(DI_SOURCE_DIR) + "/" + rel;
}

SynthOptions micro(const std::filesystem::path& out, uint64_t seed = 7) {
  SynthOptions o;
  o.config = repo("tests/data/v41-micro.json");
  o.out = out;
  o.seed = seed;
  o.shard_bytes = 1 << 20;
  return o;
}

TEST(Synth, ShrinkKeepsTheConfigConsistent) {
  SynthOptions o;
  o.layers = 2;
  o.experts = 16;
  json j = shrink_config_json(preset_config_json("v41-flash"), o);
  const json& t = j["text_config"];
  EXPECT_EQ(t["num_hidden_layers"], 2);
  EXPECT_EQ(t["compress_ratios"], json({0, 0, 0, 0, 0}));
  EXPECT_EQ(t["kv_source_layer_ids"], json::array());
  EXPECT_EQ(t["candidate_source_layer_id"], -1);
  EXPECT_EQ(t["engram_layer_ids"], json({1}));
  EXPECT_EQ(t["engram_num_embeddings"], json({384006168}));
  EXPECT_EQ(t["dspark_target_layer_ids"], json({0, 1}));
  EXPECT_EQ(t["n_routed_experts"], 16);
  EXPECT_EQ(t["num_experts_per_tok"], 6);
  EXPECT_EQ(t["dspark_n_routed_experts"], 16);
  ModelConfig c = parse_model_config(j.dump(), "shrunk");
  WeightCatalogue cat = build_weight_catalogue(c);
  EXPECT_EQ(cat.find("mtp.0.main_proj.weight")->shape, (Shape{5120, 10240}));

  o.layers = 21;
  json k = shrink_config_json(preset_config_json("v41-flash"), o);
  EXPECT_EQ(k["text_config"]["candidate_source_layer_id"], 20);
  EXPECT_EQ(k["text_config"]["engram_layer_ids"], json({1, 14}));
  EXPECT_NO_THROW(parse_model_config(k.dump(), "shrunk21"));
}

// A few layers of every V4.1 role, renumbered: the sources, the candidate pool, Engram and the
// DSpark taps follow their layers, and the layer plan binds each kept consumer to the same
// (renumbered) source as in the full model.
TEST(Synth, LayerIdsKeepAFewLayersOfEachRole) {
  SynthOptions o;
  o.layer_ids = {25, 0, 1, 2, 3, 14, 20, 21, 24};  // any order
  o.experts = 8;
  const json j = shrink_config_json(preset_config_json("v41-flash"), o);
  const json& t = j["text_config"];
  EXPECT_EQ(t["num_hidden_layers"], 9);
  EXPECT_EQ(t["compress_ratios"], json({0, 0, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(t["kv_source_layer_ids"], json({2, 4, 5}));
  EXPECT_EQ(t["index_source_layer_ids"], json({2, 4, 5, 7}));
  EXPECT_EQ(t["candidate_source_layer_id"], 5);
  EXPECT_EQ(t["engram_layer_ids"], json({1, 4}));
  EXPECT_EQ(t["engram_num_embeddings"], json({384006168, 384016682}));
  EXPECT_EQ(t["dspark_target_layer_ids"], json({6, 7, 8}));  // 37..39 not kept: the last three
  const ModelConfig c = parse_model_config(j.dump(), "roles");
  const std::vector<LayerPlan> plan = build_layer_plan(c);
  const ModelConfig full = parse_model_config(preset_config_json("v41-flash").dump(), "full");
  const std::vector<LayerPlan> full_plan = build_layer_plan(full);
  const std::vector<int64_t> old_ids = {0, 1, 2, 3, 14, 20, 21, 24, 25};
  auto renumber = [&](int64_t old) {
    return old < 0 ? int64_t{-1}
                   : static_cast<int64_t>(std::find(old_ids.begin(), old_ids.end(), old) -
                                          old_ids.begin());
  };
  for (size_t k = 0; k < old_ids.size(); ++k) {
    const LayerPlan& a = plan[k];
    const LayerPlan& b = full_plan[static_cast<size_t>(old_ids[k])];
    EXPECT_EQ(a.compress_ratio, b.compress_ratio) << k;
    EXPECT_EQ(a.mode, b.mode) << k;
    EXPECT_EQ(a.kv_source, renumber(b.kv_source)) << k;
    EXPECT_EQ(a.index_source, renumber(b.index_source)) << k;
    EXPECT_EQ(a.candidate_builder, b.candidate_builder) << k;
    EXPECT_EQ(a.candidate_reader, b.candidate_reader) << k;
    EXPECT_EQ(a.engram_slot >= 0, b.engram_slot >= 0) << k;
  }
}

TEST(Synth, LayerIdsNeedTheSourcesOfTheirLayers) {
  SynthOptions o;
  o.layer_ids = {0, 3};  // layer 3 reads layer 2's compressed KV and top-k
  try {
    shrink_config_json(preset_config_json("v41-flash"), o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 3 but not its kv source (layer 2)"),
              std::string::npos)
        << e.what();
  }
  o.layer_ids = {2, 24};  // layer 24 rescans within layer 20's candidate pool
  EXPECT_THROW(shrink_config_json(preset_config_json("v41-flash"), o), Error);
  o.layer_ids = {20, 24};
  EXPECT_NO_THROW(shrink_config_json(preset_config_json("v41-flash"), o));
  o.layer_ids = {1, 1};
  EXPECT_THROW(shrink_config_json(preset_config_json("v41-flash"), o), Error);
  o.layer_ids = {40};
  EXPECT_THROW(shrink_config_json(preset_config_json("v41-flash"), o), Error);
  o.layer_ids = {0};
  o.layers = 2;
  EXPECT_THROW(shrink_config_json(preset_config_json("v41-flash"), o), Error);
  o.layers.reset();
  EXPECT_THROW(shrink_config_json(preset_config_json("v4-flash"), o), Error);  // V4.1 only
}

TEST(Synth, ShrinkRejectsImpossibleRequests) {
  SynthOptions o;
  o.layers = 41;
  EXPECT_THROW(shrink_config_json(preset_config_json("v41-flash"), o), Error);
  o.layers.reset();
  o.experts = 0;
  EXPECT_THROW(shrink_config_json(preset_config_json("v41-flash"), o), Error);
  EXPECT_THROW(preset_config_json("v5-huge"), Error);
}

TEST(Synth, MicroCheckpointValidatesAgainstItsCatalogue) {
  testing::TempDir dir;
  SynthResult r = synthesize_checkpoint(micro(dir / "m"));
  EXPECT_GT(r.shards, 1u);
  Checkpoint ck = Checkpoint::open(dir / "m");
  EXPECT_TRUE(ck.has_index());
  EXPECT_EQ(ck.num_tensors(), r.tensors);
  EXPECT_EQ(ck.total_bytes(), r.payload_bytes);
  WeightCatalogue cat = build_weight_catalogue(load_model_config(dir / "m"));
  CatalogueReport rep = check_catalogue(ck, cat);
  check_scale_bytes(ck, cat, rep);
  EXPECT_TRUE(rep.ok()) << rep.to_string();
  EXPECT_GT(rep.scale_bytes_scanned, 0u);
  // The flat reference config written beside it describes the same model.
  ModelConfig flat = load_model_config_file(dir / "m" / "inference" / "config.json");
  EXPECT_EQ(build_weight_catalogue(flat).size(), cat.size());
}

std::string file_bytes(const std::filesystem::path& p) {
  return testing::read_file(p);
}

TEST(Synth, SameSeedSameBytesOtherSeedOtherBytes) {
  testing::TempDir dir;
  synthesize_checkpoint(micro(dir / "a", 1));
  synthesize_checkpoint(micro(dir / "b", 1));
  synthesize_checkpoint(micro(dir / "c", 2));
  const std::string f = "model-00001-of-00004.safetensors";
  ASSERT_TRUE(std::filesystem::exists(dir / "a" / f));
  EXPECT_EQ(file_bytes(dir / "a" / f), file_bytes(dir / "b" / f));
  EXPECT_NE(file_bytes(dir / "a" / f), file_bytes(dir / "c" / f));
}

TEST(Synth, PayloadsLookLikeQuantizedWeights) {
  testing::TempDir dir;
  synthesize_checkpoint(micro(dir / "m"));
  Checkpoint ck = Checkpoint::open(dir / "m");
  // FP8 weights: no NaN codes, and the quantiser's pow2 scale leaves most 32x32 blocks with an
  // absolute maximum in (224, 448].
  ConstTensorView w = ck.view("layers.2.attn.wq_b.weight");
  ASSERT_EQ(w.dtype, DType::kF8E4M3);
  auto codes = w.as<uint8_t>();
  const int64_t rows = w.shape[0], cols = w.shape[1];
  int blocks = 0, full = 0;
  for (int64_t br = 0; br < rows; br += 32) {
    for (int64_t bc = 0; bc < cols; bc += 32) {
      float amax = 0;
      for (int64_t r = br; r < std::min(rows, br + 32); ++r) {
        for (int64_t c = bc; c < std::min(cols, bc + 32); ++c) {
          uint8_t b = codes[static_cast<size_t>(r * cols + c)];
          ASSERT_NE(b & 0x7F, 0x7F) << "NaN code in an FP8 weight";
          amax = std::max(amax, std::fabs(e4m3_to_float(b)));
        }
      }
      ++blocks;
      full += amax > 224.0f;
    }
  }
  EXPECT_GT(full, blocks * 9 / 10);
  // Scales: never NaN, spread over a few exponents around 2^-12.
  auto scales = ck.view("layers.2.attn.wq_b.scale").as<uint8_t>();
  std::set<uint8_t> distinct(scales.begin(), scales.end());
  EXPECT_EQ(distinct.count(0xFF), 0u);
  EXPECT_GE(distinct.size(), 2u);
  for (uint8_t s : distinct)
    EXPECT_NEAR(s, 115, 6);
  // FP4 experts use most of the 16 nibble codes, -0 included.
  auto fp4 = ck.view("layers.0.ffn.experts.0.w1.weight").as<int8_t>();
  std::set<int> nibbles;
  for (int8_t b : fp4) {
    nibbles.insert(static_cast<uint8_t>(b) & 0xF);
    nibbles.insert(static_cast<uint8_t>(b) >> 4);
  }
  EXPECT_GE(nibbles.size(), 14u);
  // Norm weights are near 1, other bf16 weights near 0.
  auto norm = ck.view("layers.0.attn_norm.weight").as<uint16_t>();
  float mean = 0;
  for (uint16_t h : norm) {
    uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    mean += f;
  }
  EXPECT_NEAR(mean / static_cast<float>(norm.size()), 1.0f, 0.05f);
}

TEST(Synth, HugeTensorsBecomeSparseHoles) {
  testing::TempDir dir;
  SynthOptions o = micro(dir / "m");
  o.max_dense_tensor_bytes = 40000;  // the micro embed/head tables (128 KiB each) become holes
  SynthResult r = synthesize_checkpoint(o);
  EXPECT_GT(r.sparse_bytes, 0u);
  Checkpoint ck = Checkpoint::open(dir / "m");
  auto embed = ck.view("embed.weight").as<uint16_t>();
  for (uint16_t h : embed)
    ASSERT_EQ(h, 0);
}

TEST(Synth, RefusesANonEmptyOutputDirectory) {
  testing::TempDir dir;
  testing::write_file(dir / "m" / "keep.txt", "x");
  EXPECT_THROW(synthesize_checkpoint(micro(dir / "m")), Error);
}

// The fixture ships the hash primes and offsets its generator derived from the config; the
// engine derives the same from config.json alone.
TEST(EngramHashSpace, MatchesTheFixtureTokenMapFile) {
  const std::string dir = std::string(DI_SHARED_DIR) + "/fixtures/v41-tiny-a";
  if (!std::filesystem::exists(dir + "/engram_token_map.safetensors")) GTEST_SKIP();
  ModelConfig c = load_model_config(dir);
  EngramHashSpace hs = derive_engram_hash_space(c);
  SafetensorsFile f(dir + "/engram_token_map.safetensors");
  auto primes = f.view("hash_primes").as<int64_t>();
  auto offsets = f.view("hash_offsets").as<int64_t>();
  size_t i = 0;
  for (const auto& layer : hs.primes) {
    for (const auto& order : layer) {
      for (int64_t p : order)
        EXPECT_EQ(p, primes[i++]);
    }
  }
  EXPECT_EQ(i, primes.size());
  i = 0;
  for (const auto& layer : hs.offsets) {
    for (int64_t o : layer)
      EXPECT_EQ(o, offsets[i++]);
  }
  EXPECT_EQ(i, offsets.size());
}

TEST(FixtureCheckpoint, MatchesTheCatalogueOfItsConfig) {
  const std::string dir = std::string(DI_SHARED_DIR) + "/fixtures/v41-tiny-a";
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP();
  Checkpoint ck = Checkpoint::open(dir);
  EXPECT_EQ(ck.num_tensors(), 1509u);
  WeightCatalogue cat = build_weight_catalogue(load_model_config(dir));
  CatalogueReport rep = check_catalogue(ck, cat);
  check_scale_bytes(ck, cat, rep);
  EXPECT_TRUE(rep.ok()) << rep.to_string();
}

}  // namespace
}  // namespace di
