#!/usr/bin/env python3
"""Writes tests/data/engram/engram_map_v41.u32: the Engram compressed token map (delta spec §2.2) of
the bundled V4.1 tokenizer, computed with HF `tokenizers` exactly as the official reference's
`build_compressed_token_map` does. Raw little-endian uint32, one entry per raw id (129,280).

Usage: python3 tests/engram_tools/make_engram_map_golden.py [tokenizer.json [out.u32]]
"""
import pathlib
import struct
import sys

from tokenizers import Regex, Tokenizer, normalizers

root = pathlib.Path(__file__).resolve().parents[2]
path = sys.argv[1] if len(sys.argv) > 1 else str(root / "data/tokenizer/deepseek-v41/tokenizer.json")
out = sys.argv[2] if len(sys.argv) > 2 else str(root / "tests/data/engram/engram_map_v41.u32")

SENTINEL = "\ue000"
NORMALIZER = normalizers.Sequence(
    [
        normalizers.NFKC(),
        normalizers.NFD(),
        normalizers.StripAccents(),
        normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), SENTINEL),
        normalizers.Strip(),
        normalizers.Replace(SENTINEL, " "),
    ]
)


def compressed_map(tok):
    key_to_new = {}
    lookup = []
    # len(tokenizer) in transformers = vocab size including added tokens
    for token_id in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([token_id], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.id_to_token(token_id)
        else:
            normalized = NORMALIZER.normalize_str(text)
            key = normalized if normalized else text
        lookup.append(key_to_new.setdefault(key, len(key_to_new)))
    return lookup, len(key_to_new)


if __name__ == "__main__":
    lookup, classes = compressed_map(Tokenizer.from_file(path))
    pathlib.Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        f.write(struct.pack(f"<{len(lookup)}I", *lookup))
    print(f"{path}: {len(lookup)} ids, {classes} classes -> {out}")
