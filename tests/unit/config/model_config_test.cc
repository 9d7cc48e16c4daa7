#include "config/model_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "config/engram_params.h"
#include "tests_support/error_of.h"

namespace di {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

std::string repo(const std::string& rel) {
  return std::string(DI_SOURCE_DIR) + "/" + rel;
}

using test::error_of;

TEST(ModelConfig, ParsesNestedV41ReleaseConfig) {
  ModelConfig c = load_model_config_file(repo("configs/v41-flash.json"));
  EXPECT_EQ(c.family, ModelFamily::kDeepSeekV41);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.num_layers, 40);
  EXPECT_EQ(c.num_nextn_predict_layers, 3);
  EXPECT_EQ(c.num_blocks(), 43);
  EXPECT_EQ(c.q_lora_rank, 1280);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.rms_norm_eps, 1e-20);
  EXPECT_EQ(c.quant.block_n, 32);
  EXPECT_EQ(c.quant.block_k, 32);
  EXPECT_EQ(c.quant.expert_dtype, "fp4");
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_EQ(c.rope_scaling.factor, 16.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 65536);
  EXPECT_EQ(c.kv_source_layer_ids, (std::vector<int64_t>{2, 8, 14, 20}));
  EXPECT_EQ(c.candidate_source_layer_id, 20);
  EXPECT_EQ(c.engram_num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(c.image_token_id, 129264);
  EXPECT_EQ(c.pad_token_id, 2);
  EXPECT_EQ(c.dspark_n_routed_experts, 128);
  EXPECT_EQ(c.gate_temp, 1.0);  // reference default, not in the release config
  EXPECT_TRUE(c.vision.present);
  EXPECT_EQ(c.vision.num_layers, 32);
  EXPECT_EQ(c.vision.min_pixels, 295936);
  EXPECT_FALSE(c.vision.max_wh_ratio.has_value());
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
}

TEST(ModelConfig, ParsesFlatV4ReleaseConfig) {
  ModelConfig c = load_model_config_file(repo("configs/v4-flash.json"));
  EXPECT_EQ(c.family, ModelFamily::kDeepSeekV4);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_layers, 43);
  EXPECT_EQ(c.num_hash_layers, 3);
  EXPECT_EQ(c.num_blocks(), 44);
  EXPECT_EQ(c.quant.block_n, 128);
  EXPECT_EQ(c.quant.fmt, "e4m3");
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.compress_ratios[2], 4);
  EXPECT_EQ(c.compress_ratios[3], 128);
  EXPECT_FALSE(c.vision.present);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(ModelConfig, V4PaddedCompressRatiosAreTruncatedWithAWarning) {
  json j = read_json(repo("configs/v4-flash.json"));
  j["compress_ratios"].push_back(0);
  j["compress_ratios"].push_back(0);
  ModelConfig c = parse_model_config(j.dump(), "v4-0731.json");
  EXPECT_EQ(c.compress_ratios.size(), 44u);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("compress_ratios"), std::string::npos);
}

TEST(ModelConfig, ReferenceFlatNamesGiveTheSameModel) {
  const std::string dir = std::string(DI_SHARED_DIR) + "/fixtures/v41-tiny-a";
  std::ifstream probe(dir + "/config.json");
  if (!probe.good()) GTEST_SKIP() << "fixture not present: " << dir;
  ModelConfig nested = load_model_config_file(dir + "/config.json");
  ModelConfig flat = load_model_config_file(dir + "/inference_config.json");
  EXPECT_EQ(flat.family, ModelFamily::kDeepSeekV41);
  EXPECT_EQ(nested.hidden_size, flat.hidden_size);
  EXPECT_EQ(nested.num_layers, flat.num_layers);
  EXPECT_EQ(nested.num_nextn_predict_layers, flat.num_nextn_predict_layers);
  EXPECT_EQ(nested.compress_ratios, flat.compress_ratios);
  EXPECT_EQ(nested.kv_source_layer_ids, flat.kv_source_layer_ids);
  EXPECT_EQ(nested.index_source_layer_ids, flat.index_source_layer_ids);
  EXPECT_EQ(nested.candidate_source_layer_id, flat.candidate_source_layer_id);
  EXPECT_EQ(nested.engram_num_embeddings, flat.engram_num_embeddings);
  EXPECT_EQ(nested.engram_pad_token_id, flat.engram_pad_token_id);
  EXPECT_EQ(nested.dspark_num_experts_per_tok, flat.dspark_num_experts_per_tok);
  EXPECT_EQ(nested.rope_scaling.factor, flat.rope_scaling.factor);
  EXPECT_EQ(nested.rope_scaling.original_max_position_embeddings,
            flat.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(nested.rms_norm_eps, flat.rms_norm_eps);
  EXPECT_EQ(nested.routed_scaling_factor, flat.routed_scaling_factor);
  EXPECT_EQ(nested.sliding_window, flat.sliding_window);
  EXPECT_EQ(nested.quant.block_n, flat.quant.block_n);
  EXPECT_EQ(nested.image_token_id, flat.image_token_id);
  // The reference's runtime arguments are recognised, not reported as unknown.
  EXPECT_TRUE(flat.warnings.empty()) << flat.warnings.front();
}

TEST(ModelConfig, LoadFromDirectoryFindsConfigJson) {
  const std::string dir = std::string(DI_SHARED_DIR) + "/fixtures/v41-tiny-a";
  std::ifstream probe(dir + "/config.json");
  if (!probe.good()) GTEST_SKIP() << "fixture not present";
  ModelConfig c = load_model_config(dir);
  EXPECT_EQ(c.num_layers, 12);
  EXPECT_EQ(c.source, dir + "/config.json");
}

TEST(ModelConfig, MissingRequiredKeyNamesFileAndKey) {
  json j = read_json(repo("configs/v41-flash.json"));
  j["text_config"].erase("hidden_size");
  std::string msg = error_of([&] { parse_model_config(j.dump(), "model/config.json"); });
  EXPECT_NE(msg.find("model/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hidden_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
}

TEST(ModelConfig, MissingEpsIsAnErrorNotASilentDefault) {
  // 1e-20 vs 1e-6 changes every norm: the engine must never guess it.
  json j = read_json(repo("configs/v41-flash.json"));
  j["text_config"].erase("rms_norm_eps");
  std::string msg = error_of([&] { parse_model_config(j.dump(), "c.json"); });
  EXPECT_NE(msg.find("rms_norm_eps"), std::string::npos) << msg;
}

TEST(ModelConfig, UnknownKeysGiveOneWarningEach) {
  json j = read_json(repo("configs/v41-flash.json"));
  j["text_config"]["mystery_knob"] = 3;
  j["text_config"]["another_one"] = true;
  j["future_root_key"] = "x";
  ModelConfig c = parse_model_config(j.dump(), "c.json");
  ASSERT_EQ(c.warnings.size(), 3u);
  int mystery = 0;
  for (const auto& w : c.warnings)
    mystery += w.find("'mystery_knob'") != std::string::npos;
  EXPECT_EQ(mystery, 1);
}

TEST(ModelConfig, MalformedJsonNamesTheFile) {
  std::string msg = error_of([&] { parse_model_config("{\"text_config\": {", "bad/config.json"); });
  EXPECT_NE(msg.find("bad/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed JSON"), std::string::npos) << msg;
}

TEST(ModelConfig, WrongTypeNamesTheKey) {
  json j = read_json(repo("configs/v41-flash.json"));
  j["text_config"]["num_hidden_layers"] = "forty";
  std::string msg = error_of([&] { parse_model_config(j.dump(), "c.json"); });
  EXPECT_NE(msg.find("num_hidden_layers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
}

TEST(ModelConfig, CompressRatiosLengthMustMatchBlocks) {
  json j = read_json(repo("configs/v41-flash.json"));
  j["text_config"]["compress_ratios"].erase(0);
  std::string msg = error_of([&] { parse_model_config(j.dump(), "c.json"); });
  EXPECT_NE(msg.find("compress_ratios has 42 entries"), std::string::npos) << msg;
}

TEST(ModelConfig, SourceLayerWithRatioZeroIsRejected) {
  json j = read_json(repo("configs/v41-flash.json"));
  j["text_config"]["kv_source_layer_ids"] = {1, 8, 14, 20};
  j["text_config"]["index_source_layer_ids"] = {1, 8, 14, 20, 24, 28, 32, 36};
  std::string msg = error_of([&] { parse_model_config(j.dump(), "c.json"); });
  EXPECT_NE(msg.find("ratio 0"), std::string::npos) << msg;
}

TEST(ModelConfig, KvSourceMustBeAnIndexSource) {
  json j = read_json(repo("configs/v41-flash.json"));
  j["text_config"]["index_source_layer_ids"] = {2, 14, 20, 24, 28, 32, 36};
  std::string msg = error_of([&] { parse_model_config(j.dump(), "c.json"); });
  EXPECT_NE(msg.find("kv source layer 8"), std::string::npos) << msg;
}

TEST(ModelConfig, CompressedLayerNeedsASourceOfTheSameRatio) {
  json j = read_json(repo("configs/v41-flash.json"));
  j["text_config"]["kv_source_layer_ids"] = {2, 8, 14};
  j["text_config"]["index_source_layer_ids"] = {2, 8, 14, 24, 28, 32, 36};
  j["text_config"]["candidate_source_layer_id"] = 24;
  std::string msg = error_of([&] { parse_model_config(j.dump(), "c.json"); });
  EXPECT_NE(msg.find("layer 20"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kv source 14"), std::string::npos) << msg;
}

TEST(ModelConfig, EngramRowsMustMatchTheDerivedHashSpace) {
  json j = read_json(repo("configs/v41-flash.json"));
  j["text_config"]["engram_num_embeddings"] = {384006168, 384016683};
  std::string msg = error_of([&] { parse_model_config(j.dump(), "c.json"); });
  EXPECT_NE(msg.find("engram_num_embeddings[1]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("384016682"), std::string::npos) << msg;
}

TEST(ModelConfig, UnsupportedModelTypeIsRejected) {
  json j = read_json(repo("configs/v4-flash.json"));
  j["model_type"] = "llama";
  std::string msg = error_of([&] { parse_model_config(j.dump(), "c.json"); });
  EXPECT_NE(msg.find("llama"), std::string::npos) << msg;
}

TEST(EngramHashSpace, ReleasePrimesAndOffsets) {
  ModelConfig c = load_model_config_file(repo("configs/v41-flash.json"));
  EngramHashSpace hs = derive_engram_hash_space(c);
  ASSERT_EQ(hs.primes.size(), 2u);
  ASSERT_EQ(hs.primes[0].size(), 3u);
  ASSERT_EQ(hs.primes[0][0].size(), 8u);
  // Delta spec §2.3: layer 1 uses 16,000,057 ... 16,000,463; layer 14 16,000,477 ... 16,000,889.
  EXPECT_EQ(hs.primes[0][0][0], 16000057);
  EXPECT_EQ(hs.primes[0][2][7], 16000463);
  EXPECT_EQ(hs.primes[1][0][0], 16000477);
  EXPECT_EQ(hs.primes[1][2][7], 16000889);
  EXPECT_EQ(hs.table_rows[0], 384006168);
  EXPECT_EQ(hs.table_rows[1], 384016682);
  EXPECT_EQ(hs.offsets[0][0], 0);
  EXPECT_EQ(hs.offsets[0][1], 16000057);
  EXPECT_EQ(hs.offsets[1][23] + hs.primes[1][2][7], hs.table_rows[1]);
}

TEST(EngramHashSpace, PrimalityHelper) {
  EXPECT_FALSE(is_prime_u64(0));
  EXPECT_FALSE(is_prime_u64(1));
  EXPECT_TRUE(is_prime_u64(2));
  EXPECT_TRUE(is_prime_u64(3));
  EXPECT_FALSE(is_prime_u64(25));
  EXPECT_TRUE(is_prime_u64(16000057));
  EXPECT_FALSE(is_prime_u64(16000059));
}

}  // namespace
}  // namespace di
