#!/usr/bin/env python3
"""Builds the tokenizer parity corpus deterministically and writes the Hugging Face `tokenizers`
expectations that tests/unit/tokenizer/corpus_test.cc compares against.

Usage: python3 tests/tokenizer_tools/make_golden.py [tokenizer.json] [out.bin] [N]
  golden_v3.bin:  defaults (the V3 tokenizer in ../shared/data, 20,000 strings)
  golden_v41.bin: data/tokenizer/deepseek-v41/tokenizer.json tests/data/tokenizer/golden_v41.bin 4000
  With N given, the corpus has N strings and every added-token spelling of the tokenizer is
  mixed into the special-spelling fragments (so the V4.1 respellings are covered).
Needs `pip install tokenizers` (used only here, never at build or test time).

Output format (all integers unsigned LEB128 varints):
  magic "DITOKGV1"
  n_encode, then per record: flags (bit0: parse special tokens), text (len + UTF-8 bytes),
    ids (count + ids)
  n_decode, then per record: flags (bit0: skip special tokens), ids (count + ids),
    expected text (len + UTF-8 bytes)
"""
import random
import pathlib
import sys

from tokenizers import Tokenizer

SEED = 20261130
N_CORPUS = 20000

LATIN = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
ACCENTED = "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿĀāĂăĄąĆćČčĎďĒēĘęĚěĞğĪīıŁłŃńŇňŌōŐőŒœŘřŚśŞşŠšŢţŤťŪūŮůŰűŸŹźŻżŽžßẞ"
WORDS = ["the", "and", "of", "naïve", "café", "Straße", "jalapeño", "façade", "über", "élève",
         "coöperate", "Ångström", "smörgåsbord", "Łódź", "İstanbul", "déjà", "vu", "crème", "brûlée",
         "hello", "world", "tokenizer", "DeepSeek", "inference", "engine", "don't", "I'm", "we'll",
         "they're", "it's", "O'Neil", "e-mail", "co-op", "U.S.A.", "Ph.D", "HTTP/2", "x86_64"]
CJK = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 400)) + "龥龦龻㐀㐁𠀀𠀁𪚥豈"
HIRAGANA = "".join(chr(c) for c in range(0x3041, 0x3097)) + "ゝゞゟ"
KATAKANA = "".join(chr(c) for c in range(0x30A0, 0x3100)) + "ｱｲｳｴｵﾞﾟ"
HANGUL = "".join(chr(c) for c in range(0xAC00, 0xAC00 + 300)) + "ㄱㄴㄷ각"
ARABIC = "ابتثجحخدذرزسشصضطظعغفقكلمنهويءآأؤإئىةًٌٍَُِّْ٠١٢٣٤٥٦٧٨٩،؛؟"
DEVANAGARI = "अआइईउऊऋएऐओऔकखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसहािीुूृेैोौंःँ्०१२३४५६७८९।॥"
THAI = "กขฃคฅฆงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรลวศษสหฬอฮะัาำิีึืุูเแโใไๅๆ็่้๊๋์๐๑๒๓๔๕๖๗๘๙"
CYRILLIC_GREEK = "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯαβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΩάέήίόύώ"
HEBREW = "אבגדהוזחטיכלמנסעפצקרשת"
PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
UNI_PUNCT = "“”‘’«»‹›—–…·•¡¿。、，！？：；「」『』（）【】《》〈〉‰†‡§¶©®™°±×÷€£¥₹₽¢¤→←↑↓⇒∀∂∈∑∏√∞≈≠≤≥"
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028",
              "\u2029", "\u2003", "\u200b", "\u180e", "\u0085", "\u000b", "\u000c", " \n ", "\t\n",
              "    ", "\n    ", "\n\t\t"]
CONTROL = [chr(c) for c in list(range(0, 32)) + [0x7f] + list(range(0x80, 0xa0))] + [
    "\u200d", "\u200c", "\u200e", "\u200f", "\u2060", "\ufeff", "\u00ad", "\ufffd", "\ufe0f"]
COMBINING = [chr(c) for c in range(0x300, 0x370)] + ["\u20dd", "\u1ab0", "\u1dc0", "\ufe20"]
EMOJI = ["😀", "😂", "🤖", "🚀", "❤️", "👍", "👍🏽", "👍🏿", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈",
         "🧑🏾‍🚀", "👩🏻‍❤️‍💋‍👨🏼", "🇺🇸", "🇯🇵", "🇩🇪", "✨", "🔥", "1️⃣", "#️⃣", "🫠", "🦀", "🐍", "☕", "⭐",
         "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🤷‍♀️", "🧔🏻‍♂️"]
CODE = [
    "def f(x):\n    return x * 2  # double\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "const fn = async (a, b) => { await fetch(`/api/${a}?q=${b}`); };",
    "fn main() -> Result<(), Box<dyn Error>> {\n    println!(\"{:?}\", vec![1, 2, 3]);\n    Ok(())\n}",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%an%' ORDER BY id DESC;",
    "<div class=\"container\"><p id='x'>Hello &amp; welcome</p></div>",
    "#include <vector>\nstd::vector<int32_t> v{1, 2, 3};\nauto it = std::find(v.begin(), v.end(), 2);",
    "if err != nil {\n\treturn nil, fmt.Errorf(\"read %s: %w\", path, err)\n}",
    "$ ls -la /usr/local/bin | grep -E '^-rwx' && echo \"done\" >> log.txt 2>&1",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\\n\"}}",
    "x = np.linspace(0, 2*np.pi, 100); y = np.sin(x)**2 + np.cos(x)**2",
    "    @Override\n    public String toString() { return \"Point(\" + x + \", \" + y + \")\"; }",
    "let mut map: HashMap<String, Vec<u8>> = HashMap::new();",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "a:hover{color:#ff00ff;margin:0 auto!important}",
    "    \n\n\n    return;\n}\n\n\n",
    "// TODO(alice): fix this!!!\n/* multi\n   line */",
    "print(f\"{name!r:>10} {value:08.3f}\")",
]
SPECIAL_SPELLINGS = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜User｜>",
                     "<｜Assistant｜>", "<|EOT|>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>",
                     "<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>", "<｜place▁holder▁no▁0｜>",
                     "<｜place▁holder▁no▁17｜>", "<think>", "</think>", "<｜User", "｜>", "<｜",
                     "<｜User｜｜>", "<｜<｜User｜>", "<｜begin▁of▁sentence｜><｜User｜>"]


def number(rng):
    kind = rng.randrange(8)
    length = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 16, 20, 25, 32, 40, 64, 100])
    digits = "".join(rng.choice("0123456789") for _ in range(length))
    if kind == 0:
        return digits
    if kind == 1:
        return "-" + digits + "." + "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 9)))
    if kind == 2:
        return f"{int(digits):,}"
    if kind == 3:
        return digits[:3] + "e-" + digits[3:5]
    if kind == 4:
        return "".join(chr(0x660 + int(d)) for d in digits)  # Arabic-Indic digits
    if kind == 5:
        return "".join(chr(0xFF10 + int(d)) for d in digits)  # fullwidth digits
    if kind == 6:
        return "½¾²³¹⅓Ⅻⅻ①②⑳"[rng.randrange(11)] + digits
    return "0x" + "".join(rng.choice("0123456789abcdef") for _ in range(length))


def run_of(rng, alphabet, lo, hi):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def random_code_point(rng):
    while True:
        cp = rng.choice([rng.randrange(0x20, 0x3000), rng.randrange(0x3000, 0x10000),
                         rng.randrange(0x10000, 0x20000), rng.randrange(0x20000, 0x110000)])
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def fragment(rng):
    k = rng.randrange(22)
    if k == 0:
        return rng.choice(WORDS)
    if k == 1:
        return run_of(rng, LATIN + ACCENTED, 1, 12)
    if k == 2:
        return run_of(rng, CJK, 1, 12)
    if k == 3:
        return run_of(rng, HIRAGANA + KATAKANA, 1, 10)
    if k == 4:
        return run_of(rng, HANGUL, 1, 8)
    if k == 5:
        return run_of(rng, ARABIC, 1, 10)
    if k == 6:
        return run_of(rng, DEVANAGARI, 1, 10)
    if k == 7:
        return run_of(rng, THAI, 1, 10)
    if k == 8:
        return run_of(rng, CYRILLIC_GREEK + HEBREW, 1, 10)
    if k == 9:
        return rng.choice(CODE)
    if k == 10:
        return number(rng)
    if k == 11:
        return rng.choice(WHITESPACE) * rng.randint(1, 4)
    if k == 12:
        return rng.choice(EMOJI)
    if k == 13:
        return rng.choice(LATIN) + "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 6)))
    if k == 14:
        return rng.choice(CONTROL)
    if k == 15:
        return run_of(rng, PUNCT, 1, 5)
    if k == 16:
        return run_of(rng, UNI_PUNCT, 1, 4)
    if k == 17:
        return rng.choice(SPECIAL_SPELLINGS)
    if k == 18:
        return "".join(random_code_point(rng) for _ in range(rng.randint(1, 6)))
    if k == 19:
        return rng.choice(PUNCT) + run_of(rng, LATIN, 1, 8)
    if k == 20:
        return rng.choice(["'s", "'t", "'re", "'ll", "'d", "'ve", "'m", "’s"])
    return rng.choice(LATIN + ACCENTED)


def long_word(rng):
    k = rng.randrange(7)
    n = rng.choice([300, 1000, 2500, 5000])
    if k == 0:
        return "a" * n
    if k == 1:
        return run_of(rng, LATIN, n, n)
    if k == 2:
        return run_of(rng, "0123456789", n, n)
    if k == 3:
        return run_of(rng, CJK + HIRAGANA, n // 4, n // 4)
    if k == 4:
        return " " * n + "x"
    if k == 5:
        return "\n" * (n // 10) + " " * (n // 10)
    return rng.choice(["ab", "abc", "xyzw", "ла", "😀"]) * (n // 3)


def corpus(n=N_CORPUS):
    rng = random.Random(SEED)
    texts = []
    for i in range(n):
        if i % 200 == 7:
            texts.append(long_word(rng))
            continue
        sep = rng.choice(["", " ", " ", " ", "\n", ""])
        texts.append(sep.join(fragment(rng) for _ in range(rng.randint(1, 8))))
    return texts


def varint(out, value):
    assert value >= 0
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def put_bytes(out, data):
    varint(out, len(data))
    out.extend(data)


def put_ids(out, ids):
    varint(out, len(ids))
    for i in ids:
        varint(out, i)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else str(pathlib.Path(__file__).resolve().parents[3] / "shared/data/tokenizer-deepseek-v3/tokenizer.json")
    out_path = sys.argv[2] if len(sys.argv) > 2 else "tests/data/tokenizer/golden_v3.bin"
    tok = Tokenizer.from_file(path)
    if len(sys.argv) > 3:
        added = sorted(tok.get_added_tokens_decoder().items())
        SPECIAL_SPELLINGS.extend(t.content for _, t in added)
        texts = corpus(int(sys.argv[3]))
    else:
        texts = corpus()
    rng = random.Random(SEED + 1)
    plain_idx = [i for i, t in enumerate(texts) if "｜" in t or "<|" in t or "think>" in t]
    out = bytearray(b"DITOKGV1")
    records = [(1, t, e.ids) for t, e in zip(texts, tok.encode_batch(texts, add_special_tokens=False))]
    tok.encode_special_tokens = True
    plain_texts = [texts[i] for i in plain_idx]
    records += [(0, t, e.ids) for t, e in
                zip(plain_texts, tok.encode_batch(plain_texts, add_special_tokens=False))]
    tok.encode_special_tokens = False
    varint(out, len(records))
    for flags, text, ids in records:
        varint(out, flags)
        put_bytes(out, text.encode("utf-8"))
        put_ids(out, ids)
    # Decode cases: random id sequences (which cut UTF-8 sequences anywhere) with added tokens.
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    added_ids = [0, 1, 2, 128000, 128799, 128800, 128803, 128804, 128805, 128814, 128815]
    if len(sys.argv) > 3:
        added_ids += [128821, 128822, 128825, 129264, 129279]
    decodes = []
    for i in range(3000):
        n = rng.randint(0, 12)
        ids = [rng.choice(added_ids) if rng.random() < 0.15 else rng.randrange(0, 128000)
               for _ in range(n)]
        if i % 10 == 0:
            ids.append(rng.randrange(vocab_size, vocab_size + 1000))  # out of range: skipped
        skip = i % 2
        decodes.append((skip, ids, tok.decode(ids, skip_special_tokens=bool(skip))))
    varint(out, len(decodes))
    for flags, ids, text in decodes:
        varint(out, flags)
        put_ids(out, ids)
        put_bytes(out, text.encode("utf-8"))
    with open(out_path, "wb") as f:
        f.write(out)
    print(f"{len(records)} encode records ({len(plain_idx)} without special parsing), "
          f"{len(decodes)} decode records, {len(out)} bytes -> {out_path}")


if __name__ == "__main__":
    main()
