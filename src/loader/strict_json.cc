#include "loader/strict_json.h"

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "common/check.h"

namespace di {

nlohmann::json parse_json_rejecting_repeated_keys(
    std::string_view text, std::string_view label,
    const std::function<std::string(const RepeatedKey&)>& describe) {
  using Json = nlohmann::json;
  // The keys seen so far in every open object, innermost last.
  struct Frame {
    std::string owner;
    std::set<std::string, std::less<>> keys;
    std::string last_key;
  };
  std::vector<Frame> frames;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        frames.push_back({frames.empty() ? std::string() : frames.back().last_key, {}, {}});
        break;
      case Json::parse_event_t::object_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case Json::parse_event_t::key: {
        Frame& f = frames.back();
        const auto& key = parsed.get_ref<const std::string&>();
        if (!f.keys.insert(key).second) {
          DI_FAIL("{}: {}", label, describe(RepeatedKey{key, f.owner, frames.size()}));
        }
        f.last_key = key;
        break;
      }
      default:
        break;
    }
    return true;
  };
  return Json::parse(text.begin(), text.end(), callback);
}

}  // namespace di
