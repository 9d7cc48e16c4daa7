// Prints, for every code point, the ICU properties the Engram token-map builder relies on, one
// line each: "cp age mark ccc white_space simple_lower nfkd" (hex; nfkd comma-separated). Built
// and run by make_engram_unicode_delta.py, which compares the lines with HF `tokenizers`.
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/uversion.h>

#include <cstdio>
#include <string>

int main() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkd = icu::Normalizer2::getNFKDInstance(status);
  if (U_FAILURE(status)) return 1;
  std::printf("unicode %s\n", U_UNICODE_VERSION);
  for (UChar32 cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    UVersionInfo age;
    u_charAge(cp, age);
    const int8_t type = u_charType(cp);
    const bool mark =
        type == U_NON_SPACING_MARK || type == U_ENCLOSING_MARK || type == U_COMBINING_SPACING_MARK;
    status = U_ZERO_ERROR;
    const icu::UnicodeString decomposed = nfkd->normalize(icu::UnicodeString(cp), status);
    if (U_FAILURE(status)) return 1;
    std::string hex;
    for (int32_t i = 0; i < decomposed.length();) {
      const UChar32 c = decomposed.char32At(i);
      i += U16_LENGTH(c);
      char buf[16];
      std::snprintf(buf, sizeof buf, hex.empty() ? "%X" : ",%X", static_cast<unsigned>(c));
      hex += buf;
    }
    std::printf("%X %d.%d %d %u %d %X %s\n", static_cast<unsigned>(cp), age[0], age[1],
                mark ? 1 : 0, static_cast<unsigned>(nfkd->getCombiningClass(cp)),
                u_isUWhiteSpace(cp) ? 1 : 0, static_cast<unsigned>(u_tolower(cp)), hex.c_str());
  }
  return 0;
}
