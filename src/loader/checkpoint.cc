#include "loader/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <system_error>
#include <utility>

#include "common/check.h"
#include "common/logging.h"
#include "core/mapped_file.h"
#include "loader/shard_index.h"

namespace fs = std::filesystem;

namespace di {
namespace {

constexpr std::string_view kIndexFile = "model.safetensors.index.json";
constexpr std::string_view kSingleFile = "model.safetensors";
constexpr size_t kMaxListedProblems = 50;

// Problems found while cross-checking shards; reported together so that one run shows all of
// them instead of one per attempt.
class Problems {
 public:
  template <typename... Args>
  void add(fmt::format_string<Args...> f, Args&&... args) {
    lines_.push_back(fmt::format(f, std::forward<Args>(args)...));
  }
  bool empty() const { return lines_.empty(); }
  // Throws one di::Error listing (up to kMaxListedProblems of) the problems.
  void throw_if_any(std::string_view headline) const {
    if (lines_.empty()) return;
    std::string msg =
        fmt::format("{} ({} problem{}):", headline, lines_.size(), lines_.size() == 1 ? "" : "s");
    size_t shown = std::min(lines_.size(), kMaxListedProblems);
    for (size_t i = 0; i < shown; ++i)
      msg += "\n  - " + lines_[i];
    if (shown < lines_.size()) msg += fmt::format("\n  ... and {} more", lines_.size() - shown);
    DI_FAIL("{}", msg);
  }

 private:
  std::vector<std::string> lines_;
};

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool all_digits(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "model-NNNNN-of-MMMMM.safetensors" -> (N, M); nullopt for any other name.
std::optional<std::pair<uint32_t, uint32_t>> parse_numbered_shard(std::string_view name) {
  constexpr std::string_view kPrefix = "model-", kOf = "-of-", kSuffix = ".safetensors";
  constexpr size_t kDigits = 5;
  if (name.size() != kPrefix.size() + kDigits + kOf.size() + kDigits + kSuffix.size()) {
    return std::nullopt;
  }
  std::string_view n = name.substr(kPrefix.size(), kDigits);
  std::string_view of = name.substr(kPrefix.size() + kDigits, kOf.size());
  std::string_view m = name.substr(kPrefix.size() + kDigits + kOf.size(), kDigits);
  if (!name.starts_with(kPrefix) || of != kOf || !name.ends_with(kSuffix) || !all_digits(n) ||
      !all_digits(m)) {
    return std::nullopt;
  }
  auto to_u32 = [](std::string_view s) {
    uint32_t v = 0;
    for (char c : s)
      v = v * 10 + static_cast<uint32_t>(c - '0');
    return v;
  };
  return std::pair{to_u32(n), to_u32(m)};
}

std::string numbered_shard_name(uint32_t n, uint32_t m) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", n, m);
}

// Without an index: the numbered shards of the directory, validated (consistent counts, none
// missing). Empty when there are none.
std::vector<std::string> find_numbered_shards(const fs::path& dir) {
  std::vector<std::pair<std::string, std::pair<uint32_t, uint32_t>>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (auto nm = parse_numbered_shard(name); nm && is_file(it->path())) {
      found.emplace_back(std::move(name), *nm);
    }
  }
  if (ec) DI_FAIL("{}: cannot list directory: {}", dir.string(), ec.message());
  if (found.empty()) return {};
  std::sort(found.begin(), found.end());

  Problems problems;
  const uint32_t total = found.front().second.second;
  for (const auto& [name, nm] : found) {
    if (nm.second != total) {
      problems.add("{} disagrees with {} on the shard count ({} vs {})", name, found.front().first,
                   nm.second, total);
    } else if (nm.first == 0 || nm.first > total) {
      problems.add("{} has a shard number outside 1..{}", name, total);
    }
  }
  if (problems.empty()) {
    std::vector<std::string> missing;
    for (uint32_t i = 1; i <= total; ++i) {
      std::string name = numbered_shard_name(i, total);
      bool present =
          std::any_of(found.begin(), found.end(), [&](const auto& f) { return f.first == name; });
      if (!present) missing.push_back(std::move(name));
    }
    if (!missing.empty()) {
      problems.add("{} of {} shards missing: {}", missing.size(), total, fmt::join(missing, ", "));
    }
  }
  problems.throw_if_any(
      fmt::format("{}: inconsistent model-*-of-*.safetensors shards", dir.string()));

  std::vector<std::string> names;
  for (auto& f : found)
    names.push_back(std::move(f.first));
  return names;
}

}  // namespace

Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

Checkpoint Checkpoint::open(const fs::path& dir) {
  std::error_code ec;
  fs::file_status st = fs::status(dir, ec);
  if (ec || !fs::exists(st)) DI_FAIL("{}: checkpoint directory does not exist", dir.string());
  if (!fs::is_directory(st)) DI_FAIL("{}: not a directory", dir.string());

  Checkpoint ckpt;
  ckpt.dir_ = dir;
  std::optional<ShardIndex> index;
  const fs::path index_path = dir / kIndexFile;
  if (fs::exists(index_path, ec)) {
    MappedFile text(index_path.string());
    index =
        parse_shard_index(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()),
                          index_path.string());
    ckpt.has_index_ = true;
    ckpt.shard_files_ = index->shard_files;
  } else if (is_file(dir / kSingleFile)) {
    ckpt.shard_files_ = {std::string(kSingleFile)};
  } else {
    ckpt.shard_files_ = find_numbered_shards(dir);
    if (ckpt.shard_files_.empty()) {
      DI_FAIL("no weights found in {} (expected {}, {} or model-*-of-*.safetensors)", dir.string(),
              kIndexFile, kSingleFile);
    }
  }

  // Open every shard; with an index a missing or unreadable shard is one more problem to report.
  Problems problems;
  std::vector<bool> opened(ckpt.shard_files_.size(), false);
  ckpt.shards_.resize(ckpt.shard_files_.size());
  for (size_t i = 0; i < ckpt.shard_files_.size(); ++i) {
    const std::string& name = ckpt.shard_files_[i];
    fs::path p = dir / name;
    if (index && !is_file(p)) {
      size_t expected =
          static_cast<size_t>(std::count_if(index->weight_map.begin(), index->weight_map.end(),
                                            [&](const auto& kv) { return kv.second == name; }));
      problems.add("missing shard {} (indexed to hold {} tensor{})", name, expected,
                   expected == 1 ? "" : "s");
      continue;
    }
    if (!index) {
      ckpt.shards_[i] = std::make_unique<SafetensorsFile>(p.string());
    } else {
      try {
        ckpt.shards_[i] = std::make_unique<SafetensorsFile>(p.string());
      } catch (const Error& e) {
        problems.add("unreadable shard {}: {}", name, e.what());
        continue;
      }
    }
    opened[i] = true;
  }

  // Where each header tensor lives (shard indices; more than one is an error).
  std::map<std::string_view, std::vector<uint32_t>, std::less<>> located;
  for (uint32_t i = 0; i < ckpt.shards_.size(); ++i) {
    if (!opened[i]) continue;
    for (const TensorInfo& t : ckpt.shards_[i]->tensors())
      located[t.name].push_back(i);
  }
  auto shard_list = [&](const std::vector<uint32_t>& ids) {
    std::vector<std::string_view> names;
    for (uint32_t id : ids)
      names.push_back(ckpt.shard_files_[id]);
    return fmt::format("{}", fmt::join(names, ", "));
  };

  if (index) {
    std::map<std::string_view, uint32_t> shard_id;
    for (uint32_t i = 0; i < ckpt.shard_files_.size(); ++i)
      shard_id[ckpt.shard_files_[i]] = i;
    for (const auto& [tensor, file] : index->weight_map) {
      uint32_t id = shard_id.at(file);
      if (!opened[id]) continue;  // already reported as a missing/unreadable shard
      auto it = located.find(tensor);
      if (it == located.end()) {
        problems.add("tensor '{}' indexed to {} is absent from its header", tensor, file);
      } else if (std::find(it->second.begin(), it->second.end(), id) == it->second.end()) {
        problems.add("tensor '{}' indexed to {} is absent from its header (found in {})", tensor,
                     file, shard_list(it->second));
      }
    }
  }
  for (const auto& [tensor, ids] : located) {
    if (ids.size() > 1)
      problems.add("tensor '{}' present in several shards: {}", tensor, shard_list(ids));
    if (index && index->weight_map.find(tensor) == index->weight_map.end()) {
      problems.add("tensor '{}' in the header of {} is not in the index", tensor, shard_list(ids));
    }
  }
  problems.throw_if_any(
      index ? fmt::format("{}: {} does not match the shards", dir.string(), kIndexFile)
            : fmt::format("{}: inconsistent shards", dir.string()));

  for (uint32_t i = 0; i < ckpt.shards_.size(); ++i) {
    const SafetensorsFile& shard = *ckpt.shards_[i];
    for (const TensorInfo& t : shard.tensors()) {
      ckpt.tensors_.push_back(
          {t.name, t.dtype, t.shape, i, shard.header().data_offset + t.begin, t.nbytes()});
    }
  }
  std::sort(ckpt.tensors_.begin(), ckpt.tensors_.end(),
            [](const CheckpointTensor& a, const CheckpointTensor& b) { return a.name < b.name; });
  for (size_t i = 0; i < ckpt.tensors_.size(); ++i)
    ckpt.by_name_.emplace(ckpt.tensors_[i].name, i);

  if (index && index->total_size && *index->total_size != ckpt.total_bytes()) {
    // Informational only: published indexes are known to disagree with their shards here.
    DI_LOG_WARN("{}: metadata.total_size {} differs from the {} payload bytes of the shards",
                index_path.string(), *index->total_size, ckpt.total_bytes());
  }
  return ckpt;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t sum = 0;
  for (const CheckpointTensor& t : tensors_)
    sum += t.nbytes;
  return sum;
}

const CheckpointTensor* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

ConstTensorView Checkpoint::view(std::string_view name) const {
  const CheckpointTensor* t = find(name);
  if (t == nullptr) DI_FAIL("{}: no tensor '{}' in the checkpoint", dir_.string(), name);
  return view(*t);
}

void Checkpoint::release(const CheckpointTensor& t, uint64_t begin, uint64_t len) const noexcept {
  if (t.shard >= shards_.size() || begin >= t.nbytes) return;
  len = std::min(len, t.nbytes - begin);
  shards_[t.shard]->mapping().release(t.offset + begin, len);
}

ConstTensorView Checkpoint::view(const CheckpointTensor& t) const {
  DI_CHECK(t.shard < shards_.size(), "{}: tensor '{}' has shard {} of {}", dir_.string(), t.name,
           t.shard, shards_.size());
  std::span<const std::byte> bytes = shards_[t.shard]->bytes();
  DI_CHECK(t.offset <= bytes.size() && t.nbytes <= bytes.size() - t.offset,
           "{}: tensor '{}' lies outside its shard", dir_.string(), t.name);
  return {bytes.data() + t.offset, t.dtype, t.shape};
}

}  // namespace di
