#include "loader/strict_json.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "unit/loader/loader_test_util.h"

namespace di {
namespace {

using testing::error_of;
using testing::starts_with;

// Describes a repeat as "key@owner/depth" and records every call.
struct Recorder {
  std::vector<std::string> seen;
  std::string operator()(const RepeatedKey& r) {
    seen.push_back(fmt::format("{}@{}/{}", r.key, r.owner, r.depth));
    return "repeat " + seen.back();
  }
};

nlohmann::json parse(std::string_view text, Recorder& rec) {
  return parse_json_rejecting_repeated_keys(text, "file.json",
                                            [&](const RepeatedKey& r) { return rec(r); });
}

TEST(StrictJson, ParsesLikeNlohmannWithoutRepeats) {
  Recorder rec;
  // The same key in different objects (siblings, nested, in arrays) is no repeat.
  const std::string text = R"({"a": {"x": 1, "y": [{"x": 2}, {"x": 3}]}, "b": {"x": 4}, "x": 5})";
  EXPECT_EQ(parse(text, rec), nlohmann::json::parse(text));
  EXPECT_TRUE(rec.seen.empty());
}

TEST(StrictJson, RepeatedKeyNamesTheFileKeyOwnerAndDepth) {
  Recorder rec;
  auto error = [&](std::string_view text) { return error_of([&] { parse(text, rec); }); };
  EXPECT_TRUE(starts_with(error(R"({"a": 1, "b": 2, "a": 3})"), "file.json: repeat a@/1"));
  EXPECT_TRUE(starts_with(error(R"({"a": {"b": {"k": 1, "k": 2}}})"), "file.json: repeat k@b/3"));
  // An object inside an array sits under the array's key.
  EXPECT_TRUE(starts_with(error(R"({"list": [{"k": 1}, {"k": 1, "k": 2}]})"),
                          "file.json: repeat k@list/2"));
  EXPECT_EQ(rec.seen.size(), 3u);
}

TEST(StrictJson, MalformedJsonThrowsNlohmannParseError) {
  Recorder rec;
  EXPECT_THROW(parse(R"({"a": )", rec), nlohmann::json::parse_error);
  EXPECT_THROW(parse("", rec), nlohmann::json::parse_error);
}

}  // namespace
}  // namespace di
