#include "engram/token_map_builder.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/logging.h"
#include "loader/safetensors_writer.h"

namespace di {
namespace {

struct MarkOverride {
  UChar32 cp;
  bool strip;
};

struct LowercaseOverride {
  UChar32 cp;
  int count;
  std::array<UChar32, 3> lowered;
};

#include "engram/token_map_unicode_delta.inc"

constexpr UChar32 kSentinel = 0xE000;  // private use: keeps a lone space alive through Strip
constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";  // U+FFFD

// True for code points assigned after the Unicode version of HF's normalisation tables: HF sees
// them as unassigned, i.e. inert starters that neither decompose nor reorder, nor count as marks.
bool newer_than_hf_tables(UChar32 cp) {
  UVersionInfo age;
  u_charAge(cp, age);
  return age[0] > kHfNormalizationUnicodeMajor ||
         (age[0] == kHfNormalizationUnicodeMajor && age[1] > kHfNormalizationUnicodeMinor);
}

// StripAccents: HF drops General_Category Mark as of Unicode 9.0.
bool hf_strips(UChar32 cp) {
  for (const MarkOverride& o : kMarkOverrides) {
    if (o.cp == cp) return o.strip;
  }
  const int8_t type = u_charType(cp);
  const bool mark =
      type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK || type == U_COMBINING_SPACING_MARK;
  return mark && !newer_than_hf_tables(cp);
}

// Lowercase: Rust char::to_lowercase, the full mapping of one code point without context (so a
// capital sigma always becomes U+03C3).
void append_lowercase(UChar32 cp, std::vector<UChar32>& out) {
  const auto* it =
      std::lower_bound(std::begin(kLowercaseOverrides), std::end(kLowercaseOverrides), cp,
                       [](const LowercaseOverride& o, UChar32 c) { return o.cp < c; });
  if (it != std::end(kLowercaseOverrides) && it->cp == cp) {
    out.insert(out.end(), it->lowered.begin(), it->lowered.begin() + it->count);
    return;
  }
  out.push_back(u_tolower(cp));
}

// NFKC followed by NFD is NFKD; HF computes it with Unicode 9.0 tables, so code points newer than
// that are kept verbatim and split the text into independently normalised segments.
icu::UnicodeString hf_decompose(const icu::UnicodeString& text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkd = icu::Normalizer2::getNFKDInstance(status);
  DI_CHECK(U_SUCCESS(status), "ICU NFKD normaliser unavailable: {}", u_errorName(status));
  icu::UnicodeString out;
  int32_t segment_start = 0;
  auto flush = [&](int32_t end) {
    if (end > segment_start) {
      out.append(nfkd->normalize(text.tempSubStringBetween(segment_start, end), status));
      DI_CHECK(U_SUCCESS(status), "ICU NFKD failed: {}", u_errorName(status));
    }
  };
  for (int32_t i = 0; i < text.length();) {
    const UChar32 cp = text.char32At(i);
    const int32_t next = i + U16_LENGTH(cp);
    if (newer_than_hf_tables(cp)) {
      flush(i);
      out.append(cp);
      segment_start = next;
    }
    i = next;
  }
  flush(text.length());
  return out;
}

bool is_regex_space(UChar32 cp) {
  return cp == ' ' || cp == '\t' || cp == '\r' || cp == '\n';
}

void append_utf8(UChar32 cp, std::string& out) {
  const auto c = static_cast<uint32_t>(cp);
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string read_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  DI_CHECK(in.good(), "{}: cannot open tokenizer file", file.string());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DI_CHECK(!in.bad(), "{}: cannot read tokenizer file", file.string());
  return bytes;
}

// Ids are first-appearance ranks, so the class count of a well-formed map is its largest id + 1.
int64_t class_count(const CompressedTokenMap& map) {
  const auto table = map.table();
  return table.empty() ? 0 : int64_t{*std::max_element(table.begin(), table.end())} + 1;
}

bool file_exists(const std::filesystem::path& file) {
  std::error_code ec;
  return std::filesystem::is_regular_file(file, ec);
}

}  // namespace

std::string engram_normalize(std::string_view text) {
  const icu::UnicodeString decomposed = hf_decompose(icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size()))));

  // StripAccents, then Lowercase.
  std::vector<UChar32> cps;
  cps.reserve(static_cast<size_t>(decomposed.length()));
  for (int32_t i = 0; i < decomposed.length();) {
    const UChar32 cp = decomposed.char32At(i);
    i += U16_LENGTH(cp);
    if (!hf_strips(cp)) append_lowercase(cp, cps);
  }
  // Replace("[ \t\r\n]+", " "), in place.
  size_t kept = 0;
  bool in_run = false;
  for (const UChar32 cp : cps) {
    const bool space = is_regex_space(cp);
    if (!space || !in_run) cps[kept++] = space ? UChar32{' '} : cp;
    in_run = space;
  }
  cps.resize(kept);
  // Replace("^ $", sentinel): no line breaks are left, so the anchors mean the whole string.
  if (cps.size() == 1 && cps[0] == ' ') cps[0] = kSentinel;
  // Strip: Rust char::is_whitespace is the White_Space property.
  size_t begin = 0;
  size_t end = cps.size();
  while (begin < end && u_isUWhiteSpace(cps[begin]))
    ++begin;
  while (end > begin && u_isUWhiteSpace(cps[end - 1]))
    --end;
  std::string out;
  out.reserve((end - begin) * 2);
  for (size_t k = begin; k < end; ++k) {
    append_utf8(cps[k] == kSentinel ? UChar32{' '} : cps[k], out);
  }
  return out;
}

std::string compressed_token_key(const Tokenizer& tok, int32_t id) {
  const int32_t ids[] = {id};
  std::string text = tok.decode(ids, /*skip_special_tokens=*/false);
  if (text.find(kReplacementUtf8) != std::string::npos) return std::string(tok.id_to_token(id));
  std::string normalized = engram_normalize(text);
  return normalized.empty() ? text : normalized;
}

CompressedTokenMap build_compressed_token_map(const Tokenizer& tok, std::string source) {
  const size_t vocab = tok.vocab_size();
  DI_CHECK(vocab > 0, "{}: empty tokenizer vocabulary", source);
  std::unordered_map<std::string, int32_t> rank_of_key;
  rank_of_key.reserve(vocab);
  std::vector<int32_t> ids(vocab);
  for (size_t raw = 0; raw < vocab; ++raw) {
    const auto [it, inserted] =
        rank_of_key.try_emplace(compressed_token_key(tok, static_cast<int32_t>(raw)),
                                static_cast<int32_t>(rank_of_key.size()));
    ids[raw] = it->second;
  }
  const auto classes = static_cast<int64_t>(rank_of_key.size());
  return CompressedTokenMap(std::move(ids), classes, std::move(source));
}

void write_token_map_file(const CompressedTokenMap& map, const std::filesystem::path& file) {
  std::filesystem::path tmp = file;
  tmp += ".tmp-" + std::to_string(::getpid());
  try {
    SafetensorsWriter writer(tmp.string(), {{kEngramTokenMapTensor, DType::kI64,
                                             Shape{static_cast<int64_t>(map.vocab_size())}}});
    std::vector<std::byte> bytes(map.table().size() * sizeof(int64_t));
    for (size_t i = 0; i < map.table().size(); ++i) {
      const int64_t value = map.table()[i];  // little-endian host, as safetensors stores
      std::memcpy(bytes.data() + i * sizeof(int64_t), &value, sizeof(int64_t));
    }
    writer.write(bytes);
    writer.finish();
    std::error_code ec;
    std::filesystem::rename(tmp, file, ec);
    DI_CHECK(!ec, "{}: cannot rename {} into place: {}", file.string(), tmp.string(), ec.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

std::string token_map_cache_name(std::string_view tokenizer_json_bytes) {
  return fmt::format("engram_token_map-{:016x}.safetensors", fnv1a64(tokenizer_json_bytes));
}

CompressedTokenMap load_or_build_token_map(const std::filesystem::path& model_dir,
                                           const std::filesystem::path& tokenizer_json,
                                           int64_t expected_classes,
                                           const std::filesystem::path& cache_dir) {
  if (!model_dir.empty() && file_exists(model_dir / kEngramTokenMapFile)) {
    return CompressedTokenMap::load(model_dir, expected_classes);
  }
  const std::string json = read_bytes(tokenizer_json);
  std::filesystem::path cached;
  if (!cache_dir.empty()) {
    cached = cache_dir / token_map_cache_name(json);
    if (file_exists(cached)) {
      try {
        CompressedTokenMap map = CompressedTokenMap::load_file(cached, expected_classes);
        if (class_count(map) == expected_classes) return map;
        DI_LOG_WARN("{}: cached token map has {} classes, expected {}; rebuilding", cached.string(),
                    class_count(map), expected_classes);
      } catch (const Error& e) {
        DI_LOG_WARN("ignoring unreadable cached token map: {}", e.what());
      }
    }
  }

  const std::string label = tokenizer_json.string();
  CompressedTokenMap map =
      build_compressed_token_map(Tokenizer::from_json(json, label), label + ":engram_token_map");
  DI_CHECK(map.compressed_vocab_size() == expected_classes,
           "{}: the Engram compressed token map of this tokenizer has {} classes, expected {} "
           "(engram_compressed_vocab_size)",
           label, map.compressed_vocab_size(), expected_classes);

  if (!cached.empty()) {
    try {
      std::filesystem::create_directories(cache_dir);
      write_token_map_file(map, cached);
    } catch (const std::exception& e) {
      DI_LOG_WARN("cannot cache the Engram token map in {}: {}", cache_dir.string(), e.what());
    }
  }
  return map;
}

}  // namespace di
