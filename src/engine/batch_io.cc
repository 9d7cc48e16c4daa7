#include "engine/batch_io.h"

#include <unistd.h>

#include <fstream>

#include "common/check.h"
#include "common/logging.h"

namespace di {
namespace {

using json = nlohmann::ordered_json;

// Keys that are request structure, not sampling fields.
bool is_structural(const std::string& key) {
  return key == "prompt" || key == "prompt_token_ids" || key == "messages" || key == "tools" ||
         key == "custom_id" || key == "method" || key == "url" || key == "body" ||
         key == "sampling_params" || key == "chat_template_kwargs" || key == "thinking" ||
         key == "reasoning_effort" || key == "model" || key == "tool_choice" || key == "stream" ||
         key == "n" || key == "response_format";
}

void parse_body(const json& body, BatchItem& item, const std::string& where) {
  if (!body.is_object()) {
    item.error = fmt::format("{} must be a JSON object", where);
    return;
  }
  const int kinds = static_cast<int>(body.contains("prompt")) +
                    static_cast<int>(body.contains("prompt_token_ids")) +
                    static_cast<int>(body.contains("messages"));
  if (kinds != 1) {
    item.error = fmt::format(
        "{} needs exactly one of \"prompt\", \"prompt_token_ids\", "
        "\"messages\" (found {})",
        where, kinds);
    return;
  }
  if (body.contains("n") && !(body["n"].is_number_integer() && body["n"].get<int64_t>() == 1)) {
    item.error = fmt::format("{}: field \"n\": only n = 1 is supported", where);
    return;
  }
  if (body.contains("prompt")) {
    const json& p = body["prompt"];
    if (p.is_string()) {
      item.kind = BatchItem::Kind::kPrompt;
      item.prompt = p.get<std::string>();
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      item.kind = BatchItem::Kind::kTokenIds;  // OpenAI completions also accept token arrays
    } else {
      item.error = fmt::format("{}: field \"prompt\" must be a string", where);
      return;
    }
  }
  const json* ids = body.contains("prompt_token_ids")         ? &body["prompt_token_ids"]
                    : item.kind == BatchItem::Kind::kTokenIds ? &body["prompt"]
                                                              : nullptr;
  if (ids != nullptr) {
    item.kind = BatchItem::Kind::kTokenIds;
    if (!ids->is_array() || ids->empty()) {
      item.error = fmt::format("{}: token ids must be a non-empty array of integers", where);
      return;
    }
    for (size_t i = 0; i < ids->size(); ++i) {
      if (!(*ids)[i].is_number_integer()) {
        item.error = fmt::format("{}: token id [{}] is not an integer", where, i);
        return;
      }
      item.prompt_token_ids.push_back((*ids)[i].get<int64_t>());
    }
  }
  if (body.contains("messages")) {
    item.kind = BatchItem::Kind::kChat;
    item.messages = body["messages"];
    if (!item.messages.is_array() || item.messages.empty()) {
      item.error = fmt::format("{}: field \"messages\" must be a non-empty array", where);
      return;
    }
    if (body.contains("tools")) item.tools = body["tools"];
  }
  item.sampling = json::object();
  for (const auto& [key, value] : body.items()) {
    if (!is_structural(key)) item.sampling[key] = value;
  }
  if (body.contains("sampling_params")) {
    const json& sp = body["sampling_params"];
    if (!sp.is_object()) {
      item.error = fmt::format("{}: field \"sampling_params\" must be an object", where);
      return;
    }
    for (const auto& [key, value] : sp.items())
      item.sampling[key] = value;
  }
  auto read_chat_options = [&](const json& obj, const std::string& at) {
    if (obj.contains("thinking")) {
      if (!obj["thinking"].is_boolean()) {
        item.error = fmt::format("{}: field \"thinking\" must be true or false", at);
        return;
      }
      item.thinking = obj["thinking"].get<bool>();
    }
    if (obj.contains("reasoning_effort")) {
      const json& e = obj["reasoning_effort"];
      if (e.is_string()) {
        item.reasoning_effort = e.get<std::string>();
      } else if (e.is_number_integer()) {
        item.reasoning_effort = std::to_string(e.get<int64_t>());
      } else {
        item.error = fmt::format("{}: field \"reasoning_effort\" must be a string or integer", at);
      }
    }
  };
  read_chat_options(body, where);
  if (item.error.empty() && body.contains("chat_template_kwargs")) {
    if (!body["chat_template_kwargs"].is_object()) {
      item.error = fmt::format("{}: field \"chat_template_kwargs\" must be an object", where);
      return;
    }
    read_chat_options(body["chat_template_kwargs"], where + ".chat_template_kwargs");
  }
}

}  // namespace

BatchItem parse_batch_line(const std::string& line, int64_t line_number) {
  BatchItem item;
  item.line_number = line_number;
  item.custom_id = fmt::format("line-{}", line_number);
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    item.error = fmt::format("line {}: malformed JSON: {}", line_number, e.what());
    return item;
  }
  if (!j.is_object()) {
    item.error = fmt::format("line {}: expected a JSON object", line_number);
    return item;
  }
  if (j.contains("custom_id")) {
    if (!j["custom_id"].is_string() || j["custom_id"].get<std::string>().empty()) {
      item.error =
          fmt::format("line {}: field \"custom_id\" must be a non-empty string", line_number);
      return item;
    }
    item.custom_id = j["custom_id"].get<std::string>();
  }
  if (j.contains("body")) {
    if (j.contains("url")) {
      const std::string url = j["url"].is_string() ? j["url"].get<std::string>() : "";
      if (url != "/v1/chat/completions" && url != "/v1/completions") {
        item.error = fmt::format(
            "line {}: field \"url\": unsupported endpoint '{}' (supported: "
            "/v1/chat/completions, /v1/completions)",
            line_number, url);
        return item;
      }
    }
    if (j.contains("method") && j["method"] != "POST") {
      item.error = fmt::format("line {}: field \"method\" must be \"POST\"", line_number);
      return item;
    }
    parse_body(j["body"], item, fmt::format("line {}: body", line_number));
  } else {
    parse_body(j, item, fmt::format("line {}", line_number));
  }
  return item;
}

std::vector<BatchItem> read_batch_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  DI_CHECK(in.good(), "cannot open input file {}", path.string());
  std::vector<BatchItem> items;
  std::set<std::string> seen;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    BatchItem item = parse_batch_line(line, n);
    if (item.error.empty() && !seen.insert(item.custom_id).second) {
      item.error = fmt::format("line {}: duplicate custom_id '{}'", n, item.custom_id);
      item.custom_id = fmt::format("line-{}", n);
    }
    items.push_back(std::move(item));
  }
  DI_CHECK(!in.bad(), "error reading input file {}", path.string());
  return items;
}

BatchOutputWriter::BatchOutputWriter(const std::filesystem::path& path) : path_(path) {
  size_t keep = 0;
  if (std::filesystem::exists(path)) {
    std::ifstream in(path, std::ios::binary);
    DI_CHECK(in.good(), "cannot read output file {}", path.string());
    std::string line;
    size_t offset = 0;
    while (std::getline(in, line)) {
      const size_t next = offset + line.size() + 1;
      if (in.eof()) break;  // no trailing newline: a torn line
      try {
        const json j = json::parse(line);
        if (j.is_object() && j.contains("custom_id") && j["custom_id"].is_string()) {
          done_.insert(j["custom_id"].get<std::string>());
        }
        keep = next;
      } catch (const json::parse_error&) {
        break;  // torn or foreign content: everything from here is rewritten
      }
      offset = next;
    }
  }
  if (std::filesystem::exists(path) && std::filesystem::file_size(path) != keep) {
    DI_LOG_WARN("{}: removing {} bytes of incomplete output after the last complete line",
                path.string(), std::filesystem::file_size(path) - keep);
    std::filesystem::resize_file(path, keep);
  }
  file_ = std::fopen(path.string().c_str(), "ab");
  DI_CHECK(file_ != nullptr, "cannot open output file {} for appending", path.string());
}

BatchOutputWriter::~BatchOutputWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void BatchOutputWriter::write(const json& line) {
  const std::string text =
      line.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace) + "\n";
  DI_CHECK(
      std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0,
      "write to output file {} failed", path_.string());
  if (line.contains("custom_id") && line["custom_id"].is_string()) {
    done_.insert(line["custom_id"].get<std::string>());
  }
}

}  // namespace di
