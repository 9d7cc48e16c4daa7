#include "engine/bundled_tokenizer.h"

#include <fstream>
#include <iterator>

#include "common/check.h"

// The two tokenizer.json files are assembled into read-only data with `.incbin`, so the binary
// is self-contained; CMake passes their paths and makes this file depend on them.
#define DI_STRINGIFY_(x) #x
#define DI_STRINGIFY(x) DI_STRINGIFY_(x)
#define DI_INCBIN(name, path)          \
  __asm__(                             \
      ".pushsection .rodata\n"         \
      ".balign 16\n"                   \
      ".globl " #name "_begin\n" #name \
      "_begin:\n"                      \
      ".incbin \"" path                \
      "\"\n"                           \
      ".globl " #name "_end\n" #name   \
      "_end:\n"                        \
      ".byte 0\n"                      \
      ".popsection\n")

DI_INCBIN(di_bundled_tokenizer_v41, DI_BUNDLED_TOKENIZER_V41);
DI_INCBIN(di_bundled_tokenizer_v4, DI_BUNDLED_TOKENIZER_V4);

extern "C" {
extern const char di_bundled_tokenizer_v41_begin[];
extern const char di_bundled_tokenizer_v41_end[];
extern const char di_bundled_tokenizer_v4_begin[];
extern const char di_bundled_tokenizer_v4_end[];
}

namespace di {

std::string_view bundled_tokenizer_json(ModelFamily family) {
  if (family == ModelFamily::kDeepSeekV41) {
    return {di_bundled_tokenizer_v41_begin,
            static_cast<size_t>(di_bundled_tokenizer_v41_end - di_bundled_tokenizer_v41_begin)};
  }
  return {di_bundled_tokenizer_v4_begin,
          static_cast<size_t>(di_bundled_tokenizer_v4_end - di_bundled_tokenizer_v4_begin)};
}

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  DI_CHECK(in.good(), "cannot open tokenizer file {}", path.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DI_CHECK(!in.bad(), "error reading tokenizer file {}", path.string());
  return text;
}

}  // namespace

ResolvedTokenizer resolve_tokenizer(const std::filesystem::path& model_dir, ModelFamily family,
                                    const std::filesystem::path& override_path) {
  std::filesystem::path file = override_path;
  if (file.empty() && std::filesystem::exists(model_dir / "tokenizer.json")) {
    file = model_dir / "tokenizer.json";
  }
  if (!file.empty()) {
    std::string json = read_file(file);
    Tokenizer tok = Tokenizer::from_json(json, file.string());
    return {std::move(tok), file.string(), std::move(json)};
  }
  const std::string label = fmt::format("bundled {} tokenizer", model_family_name(family));
  std::string json(bundled_tokenizer_json(family));
  Tokenizer tok = Tokenizer::from_json(json, label);
  return {std::move(tok), label, std::move(json)};
}

}  // namespace di
