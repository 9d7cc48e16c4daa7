#!/usr/bin/env python3
"""Derives the bundled DeepSeek-V4.1 tokenizer from the bundled DeepSeek-V4 one.

The V4.1 tokenizer differs from V4's in exactly two added-token spellings (delta spec §7):
  id 128799  "<｜place▁holder▁no▁799｜>"  ->  "<｜System｜>"
  id 129264  "<｜image2｜>"                ->  "<｜deepseek_image｜>"
Everything else (vocab, merges, pre-tokenizer, flags of those two tokens) is byte-identical, so the
derivation is a textual replacement of the two "content" values; each must occur exactly once.

Usage: python3 scripts/derive_v41_tokenizer.py [--check]
  --check  verify the committed V4.1 files equal a fresh derivation (exit 1 otherwise)
Standard library only.
"""
import hashlib
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "data/tokenizer/deepseek-v4"
DST = ROOT / "data/tokenizer/deepseek-v41"
V4_SHA256 = "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf"
RESPELL = [
    (128799, "<｜place▁holder▁no▁799｜>", "<｜System｜>"),
    (129264, "<｜image2｜>", "<｜deepseek_image｜>"),
]


def derive() -> bytes:
    raw = (SRC / "tokenizer.json").read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != V4_SHA256:
        sys.exit(f"{SRC / 'tokenizer.json'}: sha256 {digest}, expected {V4_SHA256}")
    text = raw.decode("utf-8")
    for token_id, old, new in RESPELL:
        needle = f'"id": {token_id},\n      "content": "{old}"'
        if text.count(needle) != 1:
            sys.exit(f"token {token_id} {old!r}: expected exactly one added-token entry")
        text = text.replace(needle, f'"id": {token_id},\n      "content": "{new}"')
    return text.encode("utf-8")


def main() -> int:
    out = derive()
    if "--check" in sys.argv[1:]:
        ok = (DST / "tokenizer.json").read_bytes() == out and (
            (DST / "tokenizer_config.json").read_bytes()
            == (SRC / "tokenizer_config.json").read_bytes())
        print("V4.1 tokenizer matches its derivation" if ok else "V4.1 tokenizer differs")
        return 0 if ok else 1
    DST.mkdir(parents=True, exist_ok=True)
    (DST / "tokenizer.json").write_bytes(out)
    shutil.copyfile(SRC / "tokenizer_config.json", DST / "tokenizer_config.json")
    print(f"{DST / 'tokenizer.json'}: sha256 {hashlib.sha256(out).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
