// End-to-end tests of the deepinfer CLI: synth -> inspect, the fixtures, and every class of bad
// input (each must give a clear message naming file and tensor/field, exit code 1 or 2, and
// never crash).

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests_support/cli_runner.h"
#include "tests_support/temp_dir.h"

namespace di {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

using testing::RunResult;

RunResult run_cli(const std::string& args, const TempDir& tmp) {
  return testing::run_cli(DI_CLI_PATH, args, tmp.path());
}

std::string repo(const std::string& rel) {
  return std::string(DI_SOURCE_DIR) + "/" + rel;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = tmp_ / "model";
    RunResult r = run_cli("synth --config " + repo("tests/data/v41-micro.json") + " --out " +
                              model_.string() + " --shard-mib 1 --seed 3",
                          tmp_);
    ASSERT_EQ(r.code, 0) << r.err;
  }
  // The shard holding `tensor`, from the index.
  fs::path shard_of(const std::string& tensor) {
    json idx = json::parse(read_file(model_ / "model.safetensors.index.json"));
    return model_ / idx["weight_map"][tensor].get<std::string>();
  }
  RunResult inspect(const std::string& extra = "") {
    return run_cli("inspect " + model_.string() + " " + extra, tmp_);
  }
  TempDir tmp_;
  fs::path model_;
};

// Rewrites the JSON header of a safetensors file, keeping its data section.
void edit_header(const fs::path& file, const std::function<void(json&)>& edit) {
  std::string bytes = read_file(file);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  json h = json::parse(bytes.substr(8, n));
  edit(h);
  std::string text = h.dump();
  while ((8 + text.size()) % 8 != 0)
    text += ' ';
  uint64_t m = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &m, 8);
  out += text;
  out += bytes.substr(8 + n);
  write_file(file, out);
}

void expect_mentions(const std::string& text, std::initializer_list<std::string> words) {
  for (const auto& w : words)
    EXPECT_NE(text.find(w), std::string::npos) << "'" << w << "' in:\n" << text;
}

TEST_F(Cli, SynthThenInspectValidates) {
  RunResult r = inspect("--json --ep 2");
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_TRUE(j["validation"]["ok"].get<bool>());
  EXPECT_EQ(j["checkpoint"]["tensors"], 852);
  EXPECT_EQ(j["total"]["tensors"], 852);
  EXPECT_EQ(j["layer_plan"].size(), 11u);
  EXPECT_EQ(j["layer_plan"][5]["mode"], "full");
  EXPECT_EQ(j["layer_plan"][5]["candidate"], "builds");
  EXPECT_EQ(j["layer_plan"][7]["mode"], "reindex");
  EXPECT_EQ(j["expert_parallel"]["per_rank"].size(), 2u);
  // Both ranks hold the same replicated bytes and half of the routed experts each.
  EXPECT_EQ(j["expert_parallel"]["per_rank"][0]["routed_expert_bytes"],
            j["expert_parallel"]["per_rank"][1]["routed_expert_bytes"]);
  EXPECT_EQ(j["groups"]["routed_experts"]["bytes"].get<uint64_t>(),
            j["expert_parallel"]["per_rank"][0]["routed_expert_bytes"].get<uint64_t>() * 2);
  RunResult text = inspect();
  ASSERT_EQ(text.code, 0);
  expect_mentions(text.out, {"layer plan", "reindex", "parameters by group", "KV / state"});
}

TEST_F(Cli, InspectsTheFixtures) {
  const fs::path fixtures = fs::path(DI_SHARED_DIR) / "fixtures";
  if (!fs::exists(fixtures)) GTEST_SKIP() << "no fixtures at " << fixtures;
  int n = 0;
  for (const auto& d : fs::directory_iterator(fixtures)) {
    if (!d.is_directory() || !fs::exists(d.path() / "config.json")) continue;
    RunResult r = run_cli("inspect --json --verify-scales " + d.path().string(), tmp_);
    ASSERT_EQ(r.code, 0) << d.path() << "\n" << r.err;
    json j = json::parse(r.out);
    EXPECT_TRUE(j["validation"]["ok"].get<bool>());
    EXPECT_EQ(j["checkpoint"]["tensors"], j["total"]["tensors"]);
    ++n;
  }
  EXPECT_GE(n, 1);
}

TEST_F(Cli, FullReleaseConfigCatalogue) {
  RunResult r = run_cli("inspect --json " + repo("configs/v41-flash.json"), tmp_);
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["total"]["tensors"], 96085);
  EXPECT_EQ(j["state"]["kv_bytes_per_token"], 890.0);
  EXPECT_EQ(j["state"]["swa_entry_bytes"], 528);
}

TEST_F(Cli, TruncatedShard) {
  const fs::path f = shard_of("layers.0.attn.wkv.weight");
  fs::resize_file(f, fs::file_size(f) - 100);
  RunResult r = inspect();
  EXPECT_EQ(r.code, 2);
  expect_mentions(r.err, {f.filename().string(), "truncated"});
}

TEST_F(Cli, HeaderLengthBeyondTheFile) {
  const fs::path f = shard_of("embed.weight");
  std::string bytes = read_file(f);
  uint64_t huge = 1ull << 40;
  std::memcpy(bytes.data(), &huge, 8);
  write_file(f, bytes);
  RunResult r = inspect();
  EXPECT_EQ(r.code, 2);
  expect_mentions(r.err, {f.filename().string(), "header length"});
}

TEST_F(Cli, OverlappingOffsets) {
  const fs::path f = shard_of("layers.0.attn.kv_norm.weight");
  edit_header(f, [](json& h) {
    auto& o = h["layers.0.attn.kv_norm.weight"]["data_offsets"];
    o[0] = o[0].get<uint64_t>() - 2;
    o[1] = o[1].get<uint64_t>() - 2;
  });
  RunResult r = inspect();
  EXPECT_EQ(r.code, 2);
  expect_mentions(r.err, {f.filename().string(), "layers.0.attn.kv_norm.weight"});
}

TEST_F(Cli, OutOfRangeOffsets) {
  const fs::path f = shard_of("layers.0.attn.kv_norm.weight");
  edit_header(f, [](json& h) {
    h["layers.0.attn.kv_norm.weight"]["data_offsets"] = {1ull << 40, (1ull << 40) + 128};
  });
  RunResult r = inspect();
  EXPECT_EQ(r.code, 2);
  expect_mentions(r.err, {f.filename().string(), "layers.0.attn.kv_norm.weight"});
}

TEST_F(Cli, DtypeNotMatchingTheCatalogue) {
  const fs::path f = shard_of("layers.2.attn.q_norm.weight");
  edit_header(f, [](json& h) { h["layers.2.attn.q_norm.weight"]["dtype"] = "F16"; });
  RunResult r = inspect();
  EXPECT_EQ(r.code, 1);
  expect_mentions(r.err, {f.filename().string(), "layers.2.attn.q_norm.weight", "F16", "BF16"});
}

TEST_F(Cli, ShapeNotMatchingTheCatalogue) {
  const fs::path f = shard_of("layers.3.attn.wq_a.weight");
  edit_header(f, [](json& h) {
    auto s = h["layers.3.attn.wq_a.weight"]["shape"];
    h["layers.3.attn.wq_a.weight"]["shape"] = {s[1], s[0]};
  });
  RunResult r = inspect();
  EXPECT_EQ(r.code, 1);
  expect_mentions(
      r.err, {f.filename().string(), "layers.3.attn.wq_a.weight", "[64, 32]", "expected [32, 64]"});
}

TEST_F(Cli, EveryCatalogueProblemIsReportedAtOnce) {
  const fs::path f = shard_of("layers.4.ffn_norm.weight");
  edit_header(f, [](json& h) {
    h["layers.4.ffn_norm.weight"]["dtype"] = "F16";
    h["layers.4.attn_norm.weight"]["dtype"] = "F16";
  });
  RunResult r = inspect();
  EXPECT_EQ(r.code, 1);
  expect_mentions(r.err, {"layers.4.ffn_norm.weight", "layers.4.attn_norm.weight", "2 problem"});
}

TEST_F(Cli, MissingShard) {
  const fs::path f = shard_of("layers.5.attn.wkv.weight");
  fs::remove(f);
  RunResult r = inspect();
  EXPECT_EQ(r.code, 2);
  expect_mentions(r.err, {f.filename().string()});
}

TEST_F(Cli, MalformedConfigJson) {
  write_file(model_ / "config.json", "{\"text_config\": {\"hidden_size\": 64,");
  RunResult r = inspect();
  EXPECT_EQ(r.code, 2);
  expect_mentions(r.err, {"config.json", "malformed JSON"});
}

TEST_F(Cli, MalformedIndexJson) {
  write_file(model_ / "model.safetensors.index.json", "{\"weight_map\": [1, 2");
  RunResult r = inspect();
  EXPECT_EQ(r.code, 2);
  expect_mentions(r.err, {"model.safetensors.index.json"});
}

TEST_F(Cli, NaNScaleBytesInAWeight) {
  const std::string tensor = "layers.2.attn.wq_b.scale";
  const fs::path f = shard_of(tensor);
  std::string bytes = read_file(f);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  json h = json::parse(bytes.substr(8, n));
  const uint64_t begin = 8 + n + h[tensor]["data_offsets"][0].get<uint64_t>();
  bytes[begin + 3] = static_cast<char>(0xFF);
  write_file(f, bytes);
  RunResult plain = inspect();
  EXPECT_EQ(plain.code, 0) << "headers alone are valid";
  RunResult r = inspect("--verify-scales");
  EXPECT_EQ(r.code, 1);
  // wq_b.scale of the micro model is [8, 1]: byte 3 is row 3.
  expect_mentions(r.err, {f.filename().string(), tensor, "NaN", "first at [3, 0]"});
}

TEST_F(Cli, MissingAndExtraTensors) {
  const fs::path f = shard_of("layers.1.engram.q_weight");
  edit_header(f, [](json& h) {
    json t = h["layers.1.engram.q_weight"];
    h.erase("layers.1.engram.q_weight");
    h["layers.1.engram.q_weight_renamed"] = t;
  });
  json idx = json::parse(read_file(model_ / "model.safetensors.index.json"));
  idx["weight_map"]["layers.1.engram.q_weight_renamed"] = f.filename().string();
  idx["weight_map"].erase("layers.1.engram.q_weight");
  write_file(model_ / "model.safetensors.index.json", idx.dump());
  RunResult r = inspect();
  EXPECT_EQ(r.code, 1);
  expect_mentions(r.err,
                  {"missing tensor layers.1.engram.q_weight",
                   "unexpected tensor layers.1.engram.q_weight_renamed", f.filename().string()});
}

TEST_F(Cli, UsageErrors) {
  EXPECT_EQ(run_cli("inspect", tmp_).code, 2);
  EXPECT_EQ(run_cli("inspect /nonexistent/dir", tmp_).code, 2);
  EXPECT_EQ(run_cli("synth --config v5-huge --out " + (tmp_ / "x").string(), tmp_).code, 2);
  EXPECT_EQ(run_cli("synth --config v41-tiny --out " + model_.string(), tmp_).code, 2);
  EXPECT_EQ(run_cli("--help", tmp_).code, 0);
}

}  // namespace
}  // namespace di

namespace di {
namespace {

// Issue #3 acceptance: every fixture passes replay-fixture in fp64 (strict), fp32 (first
// divergence rule) and bf16 (the same rule against the bf16 values), in both index-key
// behaviours; --dump writes the engine's outputs.
TEST(ReplayFixtureCli, EveryFixtureEveryPrecisionAndQuirk) {
  TempDir tmp;
  const fs::path fixtures = fs::path(DI_SHARED_DIR) / "fixtures";
  if (!fs::exists(fixtures)) GTEST_SKIP() << "no fixtures at " << fixtures;
  int n = 0;
  for (const auto& d : fs::directory_iterator(fixtures)) {
    if (!fs::exists(d.path() / "cases.json")) continue;
    for (const char* prec : {"fp64", "fp32", "bf16"}) {
      for (const char* quirk : {"intended", "shipped"}) {
        const fs::path dump = tmp / (std::string(prec) + "-" + quirk + ".safetensors");
        RunResult r = run_cli("replay-fixture " + d.path().string() + " --precision " + prec +
                                  " --quirk " + quirk + " --dump " + dump.string(),
                              tmp);
        EXPECT_EQ(r.code, 0) << d.path() << " " << prec << " " << quirk << "\n" << r.out << r.err;
        EXPECT_NE(r.out.find("cases passed"), std::string::npos) << r.out;
        EXPECT_TRUE(fs::exists(dump)) << dump;
        EXPECT_GT(fs::file_size(dump), 1000u);
      }
    }
    ++n;
  }
  EXPECT_GE(n, 1);
}

// The CUDA backend through the CLI: with a GPU every case passes the fp32 rule; without one (CI)
// or in a build without the CUDA backend the run stops with an error naming the reason.
// The same with the CPU drafter (--dspark-cpu); asking for it on the CPU backend is an error.
TEST(ReplayFixtureCli, CudaBackendPassesOrNamesWhyItCannotRun) {
  TempDir tmp;
  const fs::path fixture = fs::path(DI_SHARED_DIR) / "fixtures" / "v41-tiny-a";
  if (!fs::exists(fixture / "cases.json")) GTEST_SKIP() << "no fixture at " << fixture;
  for (const std::string extra : {"", " --dspark-cpu"}) {
    RunResult r = run_cli(
        "replay-fixture " + fixture.string() + " --backend cuda --precision fp32" + extra, tmp);
    if (r.code == 0) {
      EXPECT_NE(r.out.find("backend cuda"), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("FAIL "), std::string::npos) << extra << r.out;
    } else {
#if DI_WITH_CUDA
      EXPECT_NE(r.err.find("CUDA device"), std::string::npos) << r.out << r.err;
#else
      EXPECT_NE(r.err.find("DI_ENABLE_CUDA"), std::string::npos) << r.out << r.err;
#endif
      EXPECT_LT(r.code, 1000) << "crashed\n" << r.err;
    }
  }
  RunResult cpu = run_cli("replay-fixture " + fixture.string() + " --dspark-cpu", tmp);
  EXPECT_NE(cpu.code, 0);
  EXPECT_NE(cpu.err.find("--dspark-cpu needs --backend cuda"), std::string::npos) << cpu.err;
}

TEST(ReplayFixtureCli, BadFixtureDirectoryIsAClearError) {
  TempDir tmp;
  RunResult r = run_cli("replay-fixture " + (tmp / "nope").string(), tmp);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
  write_file(tmp / "fx" / "cases.json", "{\"cases\": [");
  RunResult bad = run_cli("replay-fixture " + (tmp / "fx").string(), tmp);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("cases.json"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace di
