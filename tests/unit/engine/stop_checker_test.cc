#include "engine/stop_checker.h"

#include <gtest/gtest.h>

namespace di {
namespace {

TEST(StopChecker, CutsBeforeTheEarliestStopString) {
  StopChecker s({"END", "\n\n"}, false);
  EXPECT_FALSE(s.append("Hello"));
  EXPECT_FALSE(s.append(" wor"));
  const auto hit = s.append("ld\n\nmore END");
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, "\n\n");
  EXPECT_EQ(s.text(), "Hello world");
  EXPECT_TRUE(s.stopped());
  EXPECT_FALSE(s.append("ignored"));
  EXPECT_EQ(s.text(), "Hello world");
}

TEST(StopChecker, FindsStopStringsSplitAcrossPieces) {
  StopChecker s({"STOP"}, false);
  EXPECT_FALSE(s.append("abcST"));
  EXPECT_FALSE(s.append("O"));
  const auto hit = s.append("Pxyz");
  ASSERT_TRUE(hit);
  EXPECT_EQ(s.text(), "abc");
}

TEST(StopChecker, IncludeStopStringKeepsIt) {
  StopChecker s({"STOP"}, true);
  ASSERT_TRUE(s.append("abcSTOPdef"));
  EXPECT_EQ(s.text(), "abcSTOP");
}

TEST(StopChecker, StableTextHoldsBackPossibleStopPrefixes) {
  StopChecker s({"STOP"}, false);
  s.append("hello S");
  EXPECT_EQ(s.stable_text(false), "hell");  // the last 3 bytes could start "STOP"
  EXPECT_EQ(s.stable_text(true), "hello S");
  // Never splits a UTF-8 sequence.
  StopChecker u({"xyz"}, false);
  u.append("a\xC3\xA9");  // a + é (2 bytes): holding back 2 bytes keeps "a"
  EXPECT_EQ(u.stable_text(false), "a");
  StopChecker v({"wxyz"}, false);
  v.append("ab\xC3\xA9");  // holding back 3 bytes would cut into é: keep "a"
  EXPECT_EQ(v.stable_text(false), "a");
  u.append("bc");
  EXPECT_EQ(u.stable_text(false), "a\xC3\xA9");
}

TEST(StopChecker, StreamedTextIsAlwaysAPrefixOfTheFinalText) {
  const std::string text = "one two STOP three";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    StopChecker s({"STOP", "two S"}, false);
    std::string shown;
    for (size_t i = 0; i < text.size(); i += cut == 0 ? 1 : cut) {
      s.append(text.substr(i, cut == 0 ? 1 : cut));
      const std::string_view now = s.stable_text(false);
      ASSERT_EQ(now.substr(0, shown.size()), shown);
      shown = now;
      if (s.stopped()) break;
    }
    EXPECT_EQ(s.text(), "one ");  // "two S" starts earlier than "STOP"
    EXPECT_EQ(s.text().substr(0, shown.size()), shown);
  }
}

TEST(StopChecker, NoStopStrings) {
  StopChecker s({}, false);
  EXPECT_FALSE(s.append("anything"));
  EXPECT_EQ(s.stable_text(false), "anything");
}

}  // namespace
}  // namespace di
