#pragma once

#include <string>
#include <variant>
#include <vector>

#include "chat/message.h"

namespace di::chat {

enum class ModelVersion { kV4, kV41 };
enum class ThinkingMode { kChat, kThinking };

// What to do with special-token spellings (`<｜...｜>`, `<think>`, `</think>`, `｜DSML｜`) found in
// caller-supplied text. The official encoders copy text verbatim, and the prompt is tokenized with
// special tokens parsed, so such text becomes control tokens. kReject (default) refuses it with a
// di::Error naming the message and field; kAllow reproduces the official bytes for trusted input.
// The V4.1 image placeholder is rejected in text under both policies, as the official V4.1 code
// does.
enum class ControlTokenPolicy { kReject, kAllow };

// Unset: the version default (V4.1 "high" = 75; V4 "high" = no prefix). V4.1 accepts an integer
// in [1, 100] or "low"/"high"/"max" (50/75/100); V4 accepts "high"/"max".
using ReasoningEffort = std::variant<std::monostate, int, std::string>;

struct EncodeOptions {
  ThinkingMode thinking_mode = ThinkingMode::kThinking;
  ReasoningEffort reasoning_effort;
  // Strip reasoning of assistant turns before the last user turn (thinking mode). Forced off when
  // any message carries tools, as in the official encoders.
  bool drop_thinking = true;
  // BOS is emitted only when this is set and `context` is empty (official add_default_bos_token).
  bool add_bos = true;
  // Already-encoded conversation prefix: only the new messages are rendered, without BOS, but the
  // rules (last user turn, tool-call order, index-0 prefixes) see the whole conversation.
  std::vector<Message> context;
  // Optional OpenAI tool list attached to the first system message; an empty system message is
  // inserted at the front when there is none (vLLM's DeepSeek wrapper semantics).
  Json tools;
  ControlTokenPolicy control_tokens = ControlTokenPolicy::kReject;
};

struct EncodedPrompt {
  // Tokenize with parse_special_tokens=true.
  std::string text;
  // One entry per `<｜deepseek_image｜>` placeholder in `text`, in order (V4.1; current messages).
  std::vector<std::string> image_urls;
};

// There is no add_generation_prompt switch: as in the official encoders, a conversation ending in
// a user turn (V4.1: also a mid-conversation system turn; V4: developer turn) always gets the
// `<｜Assistant｜>` header plus `<think>` / `</think>`; one ending in an assistant turn with
// `wo_eos` is left open for continuation.
EncodedPrompt encode_v41(const std::vector<Message>& messages, const EncodeOptions& options = {});
EncodedPrompt encode_v4(const std::vector<Message>& messages, const EncodeOptions& options = {});
EncodedPrompt encode(ModelVersion version, const std::vector<Message>& messages,
                     const EncodeOptions& options = {});

// The numeric V4.1 reasoning budget for `effort` (throws di::Error for invalid values).
int v41_reasoning_budget(const ReasoningEffort& effort);

}  // namespace di::chat
