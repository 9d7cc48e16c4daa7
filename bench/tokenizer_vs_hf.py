#!/usr/bin/env python3
"""Single-thread encode throughput: DeepInfer's tokenizer vs Hugging Face `tokenizers`, one run.

Usage: python3 bench/tokenizer_vs_hf.py BUILD_DIR [TOKENIZER_JSON] [--repeat N]
  BUILD_DIR       a build tree holding bench/tokenizer_bench (e.g. build/cpu-release)
  TOKENIZER_JSON  default: data/tokenizer/deepseek-v41/tokenizer.json
Needs `pip install tokenizers` (HF is imported only here). HF runs with RAYON_NUM_THREADS=1, one
`Tokenizer.encode` call per string (the Python call overhead is ~1 us per string, negligible at
these string sizes except in the test corpus, whose strings average ~60 bytes). Both sides must
produce identical ids (FNV-1a over all ids) or the script fails.

Corpora (deterministic):
  test-corpus   the 20,000-string tokenizer parity corpus (tests/tokenizer_tools/make_golden.py)
  docs-2k       the spec documents in ../shared/docs (English prose, tables, formulas, code),
                cut into ~2 KB chunks at line ends
  mixed-2k      the parity corpus's fragments (all scripts, code, numbers, emoji) without its
                pathological long words, joined into ~2 KB strings
"""
import json
import os
import pathlib
import random
import struct
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
from tokenizers import Tokenizer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "tokenizer_tools"))
import make_golden  # noqa: E402


def chunks_of(lines, size):
    out, cur = [], ""
    for line in lines:
        cur += line
        if len(cur.encode()) >= size:
            out.append(cur)
            cur = ""
    if cur:
        out.append(cur)
    return out


def corpora():
    test = make_golden.corpus()
    docs_dir = ROOT.parent / "shared" / "docs"
    lines = []
    for path in sorted(docs_dir.glob("*.md")):
        lines += path.read_text(encoding="utf-8").splitlines(keepends=True)
    rng = random.Random(7)
    frags = [make_golden.fragment(rng) + rng.choice(["", " ", " ", "\n"]) for _ in range(60000)]
    return {"test-corpus": test, "docs-2k": chunks_of(lines, 2048), "mixed-2k": chunks_of(frags, 2048)}


def fnv(ids_per_string):
    h = 1469598103934665603
    mask = (1 << 64) - 1
    for ids in ids_per_string:
        for i in ids:
            h = ((h ^ i) * 1099511628211) & mask
        h = ((h ^ 0xFFFFFFFF) * 1099511628211) & mask
    return f"{h:016x}"


def hf_run(tok, texts, repeat):
    best, encs = 1e30, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        encs = [tok.encode(s) for s in texts]
        best = min(best, time.perf_counter() - t0)
    ids = [e.ids for e in encs]
    nbytes = sum(len(s.encode()) for s in texts)
    ntok = sum(len(x) for x in ids)
    return {"impl": "hf-tokenizers", "strings": len(texts), "bytes": nbytes, "tokens": ntok,
            "seconds": best, "mb_per_s": nbytes / best / 1e6, "tokens_per_s": ntok / best,
            "ids_fnv1a": fnv(ids)}


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repeat = 3
    if "--repeat" in sys.argv:
        repeat = int(sys.argv[sys.argv.index("--repeat") + 1])
        args = [a for a in args if a != str(repeat)]
    if not args:
        sys.exit(__doc__)
    bench = pathlib.Path(args[0]) / "bench" / "tokenizer_bench"
    tok_json = args[1] if len(args) > 1 else str(ROOT / "data/tokenizer/deepseek-v41/tokenizer.json")
    import tokenizers
    tok = Tokenizer.from_file(tok_json)
    print(f"tokenizer {tok_json}; HF tokenizers {tokenizers.__version__}; repeat {repeat} (best)")
    print(f"{'corpus':12} {'strings':>7} {'MB':>6} {'tokens':>9} | {'DeepInfer MB/s':>14} {'tok/s':>10}"
          f" | {'HF MB/s':>8} {'tok/s':>10} | speedup")
    ok = True
    for name, texts in corpora().items():
        hf = hf_run(tok, texts, repeat)
        with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            for s in texts:
                b = s.encode("utf-8", "surrogatepass")
                f.write(struct.pack("<I", len(b)) + b)
            f.flush()
            out = subprocess.run([str(bench), tok_json, f.name, "--repeat", str(repeat)],
                                 check=True, capture_output=True, text=True).stdout
        di = json.loads(out)
        same = di["ids_fnv1a"] == hf["ids_fnv1a"] and di["tokens"] == hf["tokens"]
        ok &= same
        print(f"{name:12} {hf['strings']:7d} {hf['bytes'] / 1e6:6.2f} {hf['tokens']:9d} | "
              f"{di['mb_per_s']:14.2f} {di['tokens_per_s']:10.0f} | {hf['mb_per_s']:8.2f} "
              f"{hf['tokens_per_s']:10.0f} | {di['mb_per_s'] / hf['mb_per_s']:.2f}x"
              f"{'' if same else '  IDS DIFFER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
