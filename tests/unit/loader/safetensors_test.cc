#include "loader/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests_support/temp_dir.h"
#include "unit/loader/loader_test_util.h"

namespace di {
namespace {

using testing::as_bytes;
using testing::contains;
using testing::error_of;
using testing::make_safetensors;
using testing::starts_with;

constexpr std::string_view kLabel = "dir/bad.safetensors";

std::string parse_error(const std::string& file) {
  return error_of([&] { parse_safetensors(as_bytes(file), kLabel); });
}

TEST(ParseSafetensors, ParsesValidHeader) {
  std::string file =
      make_safetensors(R"({"__metadata__":{"format":"pt","k":"v"},)"
                       R"("b":{"dtype":"BF16","shape":[2,3],"data_offsets":[48,60]},)"
                       R"("a":{"dtype":"F32","shape":[3,4],"data_offsets":[0,48]},)"
                       R"("s":{"dtype":"F8_E4M3","shape":[],"data_offsets":[60,61]},)"
                       R"("z":{"dtype":"I64","shape":[0,5],"data_offsets":[61,61]}})",
                       61);
  SafetensorsHeader h = parse_safetensors(as_bytes(file), kLabel);
  ASSERT_EQ(h.tensors.size(), 4u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].dtype, DType::kF32);
  EXPECT_EQ(h.tensors[0].shape, (Shape{3, 4}));
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.tensors[1].begin, 48u);
  EXPECT_EQ(h.tensors[1].nbytes(), 12u);
  EXPECT_EQ(h.tensors[2].name, "s");
  EXPECT_EQ(h.tensors[2].shape.rank(), 0u);
  EXPECT_EQ(h.tensors[3].name, "z");
  EXPECT_EQ(h.tensors[3].nbytes(), 0u);
  EXPECT_EQ(h.header_len, file.size() - 8 - 61);
  EXPECT_EQ(h.data_offset, 8 + h.header_len);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.metadata.at("k"), "v");
}

TEST(ParseSafetensors, AcceptsEmptyHeaderAndPadding) {
  EXPECT_TRUE(parse_safetensors(as_bytes(make_safetensors("{}", 0)), kLabel).tensors.empty());
  std::string file =
      make_safetensors(R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}   )", 3);
  EXPECT_EQ(parse_safetensors(as_bytes(file), kLabel).tensors.size(), 1u);
}

TEST(ParseSafetensors, AcceptsNegativeZeroIntegers) {
  std::string file =
      make_safetensors(R"({"a":{"dtype":"U8","shape":[-0,7],"data_offsets":[-0,0]}})", 0);
  EXPECT_EQ(parse_safetensors(as_bytes(file), kLabel).tensors.at(0).shape, (Shape{0, 7}));
}

TEST(ParseSafetensors, DeeplyNestedValuesAreRejectedWithoutRecursion) {
  constexpr size_t kDepth = 200000;
  std::string nested = std::string(kDepth, '[') + std::string(kDepth, ']');
  std::string msg = parse_error(make_safetensors(
      R"({"w":{"dtype":"U8","shape":[)" + nested + R"(],"data_offsets":[0,1]}})", 1));
  EXPECT_TRUE(contains(msg, "tensor 'w': shape[0] must be a non-negative integer, got array"));
  EXPECT_LT(msg.size(), 200u);
}

TEST(ParseSafetensors, AcceptsEveryDtypeTag) {
  for (std::string tag : {"BF16", "F16", "F32", "F64", "I8", "I16", "I32", "I64", "U8", "BOOL",
                          "F8_E4M3", "F8_E8M0"}) {
    size_t size = dtype_size(*parse_dtype(tag));
    std::string file =
        make_safetensors(R"({"t":{"dtype":")" + tag + R"(","shape":[2],"data_offsets":[0,)" +
                             std::to_string(2 * size) + "]}}",
                         2 * size);
    EXPECT_EQ(parse_safetensors(as_bytes(file), kLabel).tensors.at(0).nbytes(), 2 * size) << tag;
  }
}

TEST(ParseSafetensors, RejectsShortFileAndBadHeaderLength) {
  EXPECT_TRUE(contains(parse_error("abc"), "dir/bad.safetensors: file has 3 bytes"));
  std::string zero(8, '\0');
  zero += "{}";
  EXPECT_TRUE(contains(parse_error(zero), "dir/bad.safetensors: header length is 0"));

  std::string beyond = make_safetensors("{}", 0);
  beyond[0] = 100;  // claims 100 header bytes in a 10-byte file
  EXPECT_TRUE(contains(parse_error(beyond),
                       "dir/bad.safetensors: header length 100 beyond the file size 10"));

  std::string huge = make_safetensors("{}", 0);
  huge[5] = 0x10;  // 2^44 + 2
  EXPECT_TRUE(contains(parse_error(huge), "exceeds the limit"));
  std::string max(8, '\xff');  // 2^64 - 1: no overflow in 8 + N
  EXPECT_TRUE(contains(parse_error(max), "exceeds the limit"));
}

struct BadCase {
  const char* what;
  std::string header;
  size_t data_bytes;
  std::vector<std::string> expected;  // substrings of the message
};

class BadHeaderTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadHeaderTest, NamesFileAndField) {
  const BadCase& c = GetParam();
  std::string msg = parse_error(make_safetensors(c.header, c.data_bytes));
  EXPECT_TRUE(starts_with(msg, std::string(kLabel) + ": ")) << c.what;
  for (const std::string& e : c.expected)
    EXPECT_TRUE(contains(msg, e)) << c.what;
}

const char* const kA48 = R"("a":{"dtype":"F32","shape":[3,4],"data_offsets":[0,48]})";

INSTANTIATE_TEST_SUITE_P(
    ParseSafetensors, BadHeaderTest,
    ::testing::Values(
        BadCase{"malformed json", R"({"a": {"dtype": )", 0, {"malformed JSON header at byte 17"}},
        BadCase{"invalid utf8", "{\"\xff\":{}}", 0, {"malformed JSON header"}},
        BadCase{"top level array", "[1,2]", 0, {"header must be a JSON object, got array"}},
        BadCase{"entry not object", R"({"w":[1]})", 0, {"tensor 'w'", "entry must be an object"}},
        BadCase{"missing dtype",
                R"({"w":{"shape":[1],"data_offsets":[0,1]}})",
                1,
                {"tensor 'w'", "missing field 'dtype'"}},
        BadCase{"missing shape",
                R"({"w":{"dtype":"U8","data_offsets":[0,1]}})",
                1,
                {"tensor 'w'", "missing field 'shape'"}},
        BadCase{"missing offsets",
                R"({"w":{"dtype":"U8","shape":[1]}})",
                1,
                {"tensor 'w'", "missing field 'data_offsets'"}},
        BadCase{"dtype not string",
                R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})",
                1,
                {"tensor 'w'", "'dtype' must be a string"}},
        BadCase{"unknown dtype",
                R"({"w":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}})",
                1,
                {"tensor 'w'", "unknown dtype 'F4'"}},
        BadCase{"shape not array",
                R"({"w":{"dtype":"U8","shape":"1","data_offsets":[0,1]}})",
                1,
                {"tensor 'w'", "'shape' must be an array"}},
        BadCase{"negative dim",
                R"({"w":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,1]}})",
                1,
                {"tensor 'w'", "shape[1] = -1 is negative"}},
        BadCase{"float dim",
                R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})",
                1,
                {"tensor 'w'", "shape[0] must be a non-negative integer"}},
        BadCase{"dim beyond int64",
                R"({"w":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]}})",
                1,
                {"tensor 'w'", "shape[0] = 9223372036854775808 does not fit int64"}},
        BadCase{"numel overflow",
                R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}})",
                1,
                {"tensor 'w'", "more elements than int64"}},
        BadCase{"byte size overflow",
                R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,1]}})",
                1,
                {"tensor 'w'", "more than 2^64 bytes"}},
        BadCase{"offsets not pair",
                R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})",
                1,
                {"tensor 'w'", "'data_offsets' must be an array [begin, end]"}},
        BadCase{"negative offset",
                R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})",
                1,
                {"tensor 'w'", "data_offsets[0] must be a non-negative integer"}},
        BadCase{"begin after end",
                R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[2,1]}})",
                2,
                {"tensor 'w'", "data_offsets [2, 1] has begin > end"}},
        BadCase{"size mismatch",
                R"({"w":{"dtype":"F32","shape":[3,4],"data_offsets":[0,40]}})",
                40,
                {"tensor 'w': 3 x 4 F32 needs 48 bytes, data_offsets span 40"}},
        BadCase{"truncated",
                std::string("{") + kA48 + "}",
                40,
                {"truncated: data section has 40 bytes but tensors need 48", "tensor 'a'"}},
        BadCase{"out of range",
                std::string("{") + kA48 +
                    R"(,"b":{"dtype":"F32","shape":[3,4],"data_offsets":[1000,1048]}})",
                96,
                {"tensor 'b': data_offsets [1000, 1048] lie outside the data section of 96"}},
        BadCase{"overlap",
                std::string("{") + kA48 +
                    R"(,"b":{"dtype":"F32","shape":[3,4],"data_offsets":[40,88]}})",
                88,
                {"tensor 'b' data_offsets [40, 88] overlaps tensor 'a' data_offsets [0, 48]"}},
        BadCase{"hole",
                std::string("{") + kA48 +
                    R"(,"b":{"dtype":"F32","shape":[3,4],"data_offsets":[56,104]}})",
                104,
                {"hole of 8 bytes", "tensor 'a' (ends at 48)", "tensor 'b'"}},
        BadCase{"first not at zero",
                R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                8,
                {"first tensor 'w' data_offsets [4, 8] begins at 4, not 0"}},
        BadCase{"trailing bytes",
                std::string("{") + kA48 + "}",
                50,
                {"data section has 50 bytes but tensors cover only 48"}},
        BadCase{"duplicate tensor",
                std::string("{") + kA48 + "," + kA48 + R"(,"b":{"dtype":"U8","shape":[0],)" +
                    R"("data_offsets":[48,48]}})",
                48,
                {"tensor 'a' listed twice in the header"}},
        BadCase{"duplicate field",
                R"({"w":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})",
                1,
                {"key 'dtype' listed twice in the entry of 'w'"}},
        BadCase{"metadata not object",
                R"({"__metadata__":["x"]})",
                0,
                {"__metadata__ must be an object of strings, got array"}},
        BadCase{"metadata value not string",
                R"({"__metadata__":{"format":1}})",
                0,
                {"__metadata__['format'] must be a string, got number"}}),
    [](const ::testing::TestParamInfo<BadCase>& param_info) {
      std::string name = param_info.param.what;
      for (char& c : name) {
        if (c == ' ') c = '_';
      }
      return name;
    });

TEST(SafetensorsFile, ViewsPointIntoTheMap) {
  testing::TempDir dir;
  std::string data(48 + 6, '\0');
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<char>(i);
  std::string file = make_safetensors(
      std::string("{") + kA48 + R"(,"b":{"dtype":"I16","shape":[3],"data_offsets":[48,54]}})",
      data);
  testing::write_file(dir / "x.safetensors", file);
  SafetensorsFile st((dir / "x.safetensors").string());
  EXPECT_EQ(st.file_size(), file.size());
  ASSERT_NE(st.find("b"), nullptr);
  EXPECT_EQ(st.find("c"), nullptr);
  ConstTensorView b = st.view("b");
  EXPECT_EQ(b.dtype, DType::kI16);
  EXPECT_EQ(b.shape, (Shape{3}));
  EXPECT_EQ(b.data, st.bytes().data() + st.header().data_offset + 48);  // zero-copy
  EXPECT_EQ(static_cast<int>(b.bytes()[0]), 48);
  EXPECT_EQ(static_cast<int>(b.bytes()[5]), 53);
  ConstTensorView a = st.view(*st.find("a"));
  EXPECT_EQ(a.nbytes(), 48u);
  std::string msg = error_of([&] { st.view("c"); });
  EXPECT_TRUE(contains(msg, (dir / "x.safetensors").string()));
  EXPECT_TRUE(contains(msg, "no tensor 'c'"));
}

TEST(SafetensorsFile, ErrorsNameThePath) {
  testing::TempDir dir;
  testing::write_file(dir / "t.safetensors", make_safetensors(std::string("{") + kA48 + "}", 40));
  std::string path = (dir / "t.safetensors").string();
  std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_TRUE(starts_with(msg, path + ": truncated"));
  EXPECT_TRUE(contains(error_of([&] { SafetensorsFile f(path + ".nope"); }), path + ".nope"));
}

TEST(SafetensorsFile, ReadsTheTinyFixture) {
  std::filesystem::path path = std::filesystem::path(DI_SHARED_DIR) / "fixtures/v41-tiny-a";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  SafetensorsFile st((path / "model.safetensors").string());
  EXPECT_EQ(st.tensors().size(), 1509u);
  EXPECT_EQ(st.header().metadata.at("format"), "pt");
  EXPECT_EQ(st.header().data_offset % 8, 0u);
  const TensorInfo* embed = st.find("embed.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, DType::kBF16);
  EXPECT_EQ(embed->shape, (Shape{1280, 192}));
  EXPECT_EQ(st.tensors().back().end + st.header().data_offset, st.file_size());
}

}  // namespace
}  // namespace di
