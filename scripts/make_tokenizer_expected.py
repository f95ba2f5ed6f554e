#!/usr/bin/env python3
"""Writes the expected token ids the tokenizer tests compare against.

The reference is llama.cpp through llama-cpp-python (vocab-only loads). For
each target below, every string of the corpus is tokenized with no BOS/EOS
and no special-token parsing; where parsing special tokens or adding BOS/EOS
changes the answer, that answer is recorded too. The token pieces
(llama_token_to_piece, special=True) of the ids seen are recorded as well.

Targets:
  smollm2        SmolLM2-135M-Instruct.Q4_1.gguf (byte-level BPE, pre smollm)
  gemma3         gemma-3-270m-q4_k_m.gguf (SentencePiece)
  llama-bpe      SmolLM2's vocabulary and merges with tokenizer.ggml.pre =
                 llama-bpe (Llama 3's pre-tokenizer), written vocab-only
  qwen2          the same with tokenizer.ggml.pre = qwen2

The C++ test builds the last two the same way (SmolLM2's vocabulary, the pre
name replaced), so CI needs neither llama.cpp nor these derived files.

Usage (from the repository root, with the project venv):
  ~/.cache/strata/venv/bin/python scripts/make_tokenizer_expected.py \
      [--models DIR] [--out tests/tokenizer/data] [--target NAME ...]
  --pre NAME... also checks extra pre-tokenizer names (SmolLM2's vocabulary
  with that pre) and writes them beside the others as pre-NAME.json.
"""

import argparse
import ctypes
import hashlib
import json
import os
import random
import sys
import tempfile

import gguf
import llama_cpp

SMOLLM = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"


def corpus():
    """The test strings, as bytes. Deterministic."""
    s = []
    add = lambda *xs: s.extend(x.encode() if isinstance(x, str) else x for x in xs)

    # Whitespace: empty, lone and repeated spaces, tabs, newlines.
    add("", " ", "  ", "   ", "      ", " Hello", "  Hello", "   Hello world",
        "Hello  world", "Hello   world  ", "Hello ", "Hello  ", "a b  c   d    e",
        "\t", "\t\t", "\tword", "\t\tword", "\t\t\tword", "\t\t\t\tword",
        " \tword", "\t word", "\t \t word", "word\t", "word\t\tword",
        "\n", "\n\n", "\n\n\n", "\r", "\r\n", "\r\n\r\n", "a\nb", "a\r\nb",
        "a\n\nb", "a\n\n\nb", "line1\n\nline2\n", "a\rb", "\n \n", " \n", "\n ",
        "  \n  ", "\t\n", "\n\t", "end.\n", " \n\n \n", "\v\f", "a\u000bb",
        "\u00a0", "a\u00a0b", "\u3000", "a\u3000b", "\u2028", "a\u2029b",
        "\u200b", "a\u200bb", "\u2003\u2003x", "\u0085", "x\u1680y",
        "\ufeffBOM at start")
    # Digits.
    add("0", "1", "12", "123", "1234", "12345", "123456", "1234567",
        "12345678901234567890", "3.14159", "1,000,000", "2024-01-01",
        "a1b22c333d4444", "١٢٣٤٥", "½ ⅓ ¼", "Ⅻ", "x² + y³", "0x1F 0b1010",
        "$100.00", "10%", "1e-9", " 42", "  42", "\t42")
    # Punctuation runs and symbols.
    add("!!!", "...", "?!?!", "---", "!@#$%^&*()_+", "''", '"quoted"',
        "(a)", "[b]", "{c}", "<d>", "a.b.c", "...and", "Hello, world!",
        "Wait... what?!", "~~~", "`code`", "|||", "$$$", "+=-", "<<>>",
        "«guillemets»", "„quotes“", "—dash—", "…", "¿Qué?", "¡Hola!",
        "C'est la vie", "l'homme", "it's", "IT'S", "we'll", "they're",
        "I'd", "you've", "I'm", "'s", "'S", "'ll", "'Re", "don't", "O'Neil",
        "rock 'n' roll", "''s", "a'", "' s", "'\t")
    # Code.
    add("def f(x):\n    return x * 2\n",
        "int main() {\n\treturn 0;\n}\n",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        "if x == 1:\n        pass\n    else:\n        print('no')",
        '{"key": "value", "n": [1, 2, 3], "ok": true}',
        "<html><body><p class=\"x\">Hi</p></body></html>",
        "SELECT * FROM t WHERE id = 42;",
        "x = a->b; y = c::d; z = e?.f ?? g;",
        "#include <stdio.h>\n#define MAX 100\n",
        "    indented four\n        indented eight",
        "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
        "a_b_c = snake_case + camelCase + PascalCase + UPPER_CASE",
        "https://example.com/path?q=1&r=2#frag", "user@example.com",
        "C:\\Windows\\System32", "/usr/local/bin/", "git commit -m \"msg\"",
        "$ echo $HOME && ls -la | grep foo > out.txt 2>&1")
    # Scripts other than Latin.
    add("你好世界", "你好，世界！", "日本語のテキスト", "カタカナ", "한국어 텍스트",
        "中文English混合", "Привет, мир!", "Γειά σου Κόσμε", "مرحبا بالعالم",
        "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "ሰላም", "Ελληνικά 123",
        "Ünïcödé", "Äpfel", "naïve café résumé", "Straße", "İstanbul", "ǅ ǈ",
        "ﬁ ligature", "ＡＢＣ　ｆｕｌｌ", "𝐀𝐁𝐂", "𝕳𝖊𝖑𝖑𝖔", "𠜎𠜱𠝹", "\U0002a6b2")
    # Emoji and other 4-byte characters.
    add("😀", "😀😀😀", "Hi 😀!", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "❤️", "☺︎",
        "🦙 llama", "\U0001F600text", "𓀀𓀁", "🀄", "\U000E0001", "\U0010FFFD",
        "\U000F0000 private use")
    # Combining marks.
    add("e\u0301", "cafe\u0301", "n\u0303", "a\u0300\u0301\u0302",
        "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇", "\u0301", " \u0301", "\u0301abc",
        "क्षि", "ก่", "\u05d0\u05b8", "x\u20dd")
    # Control characters.
    add("\x00", "a\x00b", "\x01\x02\x03", "\x7f", "\x1b[31mred\x1b[0m",
        "\x08back")
    # Special-token text as a user might type it, and text right after it.
    add("<|im_start|>user\nHi<|im_end|>", "<|im_start|>assistant\n",
        "<|im_start|> hi", "Hello<|im_end|>world", "<|endoftext|>",
        "<|endoftext|>Hello", "text<|endoftext|>", "<|im_start|><|im_end|>",
        "<|im_start|>\n\n<|im_end|>", "< |im_start| >", "<|im_start",
        "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<bos>Hello",
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
        "<start_of_turn> model", "<end_of_turn>\n", "text<end_of_turn>",
        "[multimodal]", "<start_of_image>", "<s>", "</s>", "<s>Hello</s>",
        "<repo_name>x<file_sep>y", "<|im_start|>system\nYou are helpful."
        "<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
        " <|im_end|> ", "\n<|im_end|>\n", "<unused0>", "<unused99>x")
    # Text cut inside a character, and other bytes that are not UTF-8.
    euro = "€".encode()
    emoji = "😀".encode()
    add(euro[:2], euro[:1], b"a" + euro[:2] + b"b", emoji[:3], emoji[:2],
        emoji[:1], b"x" + emoji[:3], emoji[1:], b"\x80", b"abc\x80def",
        b"\xbf\xbf", b"\xed\xa0\x80", b"\xed\xa0\xbd\xed\xb8\x80",
        b"a\xed\xbf\xbfb", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80",
        b"\xff\xfe", b"\xfe", b"\xf8\x88\x80\x80\x80", b"caf\xe9",
        b"\xc3", b"\xc3(", b"\xe2\x82(", "日本".encode()[:4],
        "你好".encode()[1:], b"<|im_start|>" + euro[:2])
    # Longer text.
    add("The quick brown fox jumps over the lazy dog. " * 4,
        "In 1492, Columbus sailed the ocean blue; in 1969, Apollo 11 landed "
        "on the Moon (July 20th, 20:17 UTC). Isn't that something?",
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do "
        "eiusmod tempor incididunt ut labore et dolore magna aliqua.\n\n"
        "Ut enim ad minim veniam, quis nostrud exercitation ullamco.",
        "   leading spaces and trailing spaces   ",
        "Mixed\tTabs\tand  spaces\n\tindent\n  \tmixed")

    # Random mixtures of fragments (deterministic seed).
    pool = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "a", "the",
            " the", "Hello", "WORLD", "it's", "'ll", "123", "4567", "8",
            "3.5", ".", ",", "!", "?", "...", "--", "()", "[]", "{}", "<", ">",
            "/", "\\", "\"", "'", "_", "=", "+", "#", "@", "$", "%", "^", "&",
            "*", "~", "`", "|", ";", ":", "你好", "世界", "日本", "한국",
            "Привет", "мир", "Ελλάδα", "ñ", "é", "e\u0301", "\u0301", "ü",
            "😀", "👍🏽", "🇫🇷", "𝕏", "𠜎", "\u00a0", "\u3000", "\u200b",
            "\u2028", "٣", "ب", "ש", "क", "्", "ก", "่", "<|im_start|>",
            "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>",
            "<bos>", "<eos>", "<s>", "</s>", "[multimodal]", "\x00", "\x1f",
            "fn", "def", "return", "0x", "ALLCAPS", "MiXeD", "don", "'t",
            "'S", "'VE", "\t\t\t", "    ", "\n    ", "\n\t"]
    rng = random.Random(20261130)
    for _ in range(200):
        n = rng.randint(1, 14)
        s.append("".join(rng.choice(pool) for _ in range(n)).encode())
    # Random byte strings: stray and truncated UTF-8 among ASCII.
    frags = [b"a", b" ", b"\n", b"\x80", b"\xc3", b"\xc3\xa9", b"\xe4\xbd",
             b"\xe4\xbd\xa0", b"\xf0\x9f", b"\xf0\x9f\x98\x80", b"\xed\xa0\x80",
             b"\xff", b"1", b"'s", b"<|im_end|>"]
    for _ in range(40):
        s.append(b"".join(rng.choice(frags) for _ in range(rng.randint(1, 8))))
    return s


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_with_pre(src, dst, pre):
    """A vocab-only copy of `src`'s metadata with tokenizer.ggml.pre = pre."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        if key == "tokenizer.ggml.pre":
            writer.add_key_value(key, pre, gguf.GGUFValueType.STRING)
            continue
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


def piece(llm, token, special):
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, 256, 0, special)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, -n, 0, special)
    return buf.raw[:n]


def text_field(b):
    try:
        return {"text": b.decode("utf-8")}
    except UnicodeDecodeError:
        return {"hex": b.hex()}


def expected(path, texts, meta):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    cases = []
    seen = set()
    for b in texts:
        ids = llm.tokenize(b, add_bos=False, special=False)
        case = dict(text_field(b))
        case["ids"] = ids
        with_special = llm.tokenize(b, add_bos=False, special=True)
        if with_special != ids:
            case["ids_parse_special"] = with_special
        with_bos = llm.tokenize(b, add_bos=True, special=False)
        if with_bos != ids:
            case["ids_add_special"] = with_bos
        seen.update(ids, with_special, with_bos)
        cases.append(case)
    n_vocab = llm.n_vocab()
    sample = sorted(seen | set(range(min(n_vocab, 400))) |
                    set(range(0, n_vocab, 211)))
    pieces = [[t, piece(llm, t, True).hex(), piece(llm, t, False).hex()]
              for t in sample]
    out = dict(meta)
    out["cases"] = cases
    out["pieces"] = pieces
    return out


def dump(data):
    """JSON with one case (and one piece) per line, for readable diffs."""
    compact = lambda x: json.dumps(x, ensure_ascii=True, separators=(",", ":"))
    head = {k: v for k, v in data.items() if k not in ("cases", "pieces")}
    lines = [compact(head)[:-1] + ',"cases":[']
    lines.append(",\n".join(compact(c) for c in data["cases"]))
    lines.append('],"pieces":[')
    lines.append(",\n".join(compact(p) for p in data["pieces"]))
    lines.append("]}")
    return "\n".join(lines) + "\n"


def reference_version():
    """llama-cpp-python's version and the llama.cpp build it wraps."""
    lib = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    out = {
        "llama_cpp_python": llama_cpp.__version__,
        "llama_version": llama_cpp.llama_version().decode(),
    }
    try:  # ggml_version()/ggml_commit(): the llama.cpp tree it was built from
        base = ctypes.CDLL(os.path.join(lib, "libggml-base.so"))
        for name in ("ggml_version", "ggml_commit"):
            fn = getattr(base, name)
            fn.restype = ctypes.c_char_p
            out[name] = fn().decode()
    except (OSError, AttributeError):
        pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models",
                    default=os.path.expanduser("~/.cache/strata/models"))
    ap.add_argument("--out", default="tests/tokenizer/data")
    ap.add_argument("--target", nargs="*",
                    default=["smollm2", "gemma3", "llama-bpe", "qwen2"])
    ap.add_argument("--pre", nargs="*", default=[])
    args = ap.parse_args()

    texts = corpus()
    ref = reference_version()
    smollm = os.path.join(args.models, SMOLLM)
    gemma = os.path.join(args.models, GEMMA)
    os.makedirs(args.out, exist_ok=True)
    jobs = []  # (output name, model file, base file name, pre override)
    for t in args.target:
        if t == "smollm2":
            jobs.append(("smollm2", smollm, SMOLLM, None))
        elif t == "gemma3":
            jobs.append(("gemma3", gemma, GEMMA, None))
        else:
            jobs.append((t, smollm, SMOLLM, t))
    for p in args.pre:
        jobs.append(("pre-" + p, smollm, SMOLLM, p))
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, base, pre in jobs:
            meta = {
                "generator": "scripts/make_tokenizer_expected.py",
                "reference": ref,
                "model": base,
                "model_sha256": sha256(path),
                "pre_override": pre,
            }
            load = path
            if pre is not None:
                load = os.path.join(tmp, name + ".gguf")
                write_with_pre(path, load, pre)
            data = expected(load, texts, meta)
            dst = os.path.join(args.out, name + ".json")
            with open(dst, "w") as f:
                f.write(dump(data))
            n_extra = sum("ids_parse_special" in c for c in data["cases"])
            print(f"{dst}: {len(data['cases'])} strings "
                  f"({n_extra} differ with parse_special), "
                  f"{len(data['pieces'])} pieces", file=sys.stderr)


if __name__ == "__main__":
    main()
