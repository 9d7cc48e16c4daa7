#include "core/workspace_plan.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace di {
namespace {

TEST(WorkspacePlan, LaysOutAlignedNonOverlappingSlots) {
  WorkspacePlan p;
  EXPECT_EQ(p.add("x", 100), 0u);
  EXPECT_EQ(p.add("logits", 129280 * 4, 1024), 1u);
  EXPECT_EQ(p.add("flags", 3, 1), 2u);
  EXPECT_EQ(p.slot("x").offset, 0u);
  EXPECT_EQ(p.slot("logits").offset, 1024u);
  EXPECT_EQ(p.slot("flags").offset, 1024u + 129280 * 4);
  EXPECT_EQ(p.total_bytes(), 1024u + 129280 * 4 + 3);
  for (size_t i = 1; i < p.slots().size(); ++i) {
    const auto& prev = p.slots()[i - 1];
    EXPECT_GE(p.slots()[i].offset, prev.offset + prev.bytes);
    EXPECT_EQ(p.slots()[i].offset % p.slots()[i].alignment, 0u);
  }
  EXPECT_NE(p.describe().find("logits"), std::string::npos);
}

TEST(WorkspacePlan, RejectsBadDeclarations) {
  WorkspacePlan p;
  p.add("a", 8);
  EXPECT_THROW(p.add("a", 8), Error);
  EXPECT_THROW(p.add("b", 8, 3), Error);
  EXPECT_THROW(p.add("c", 8, 0), Error);
  EXPECT_THROW(p.add("huge", SIZE_MAX), Error);
  EXPECT_THROW((void)p.slot("missing"), Error);
}

}  // namespace
}  // namespace di
