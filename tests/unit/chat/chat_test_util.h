#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "chat/encoder.h"
#include "chat/message.h"

namespace di::chat::testing {

inline Json load_golden(const std::string& name) {
  std::ifstream in(std::string(DI_SOURCE_DIR "/tests/data/chat/") + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

inline ThinkingMode mode_of(const Json& c) {
  return c.at("thinking_mode") == "thinking" ? ThinkingMode::kThinking : ThinkingMode::kChat;
}

// The encode options a golden case describes.
inline EncodeOptions options_of(const Json& c) {
  EncodeOptions o;
  o.thinking_mode = mode_of(c);
  if (auto it = c.find("reasoning_effort"); it != c.end()) {
    if (it->is_number_integer()) {
      o.reasoning_effort = it->get<int>();
    } else {
      o.reasoning_effort = it->get<std::string>();
    }
  }
  if (auto it = c.find("drop_thinking"); it != c.end()) o.drop_thinking = it->get<bool>();
  if (auto it = c.find("add_bos"); it != c.end()) o.add_bos = it->get<bool>();
  if (auto it = c.find("context"); it != c.end()) o.context = parse_messages_json(*it);
  return o;
}

}  // namespace di::chat::testing
