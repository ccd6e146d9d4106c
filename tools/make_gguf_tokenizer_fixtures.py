#!/usr/bin/env python3
"""Builds the GGUF tokenizer fixtures under tests/fixtures/gguf/ for tests/tokenizer_gguf_test.cc.

For each of four families it writes a small vocabulary-only GGUF file made from the small
tokenizer.json fixtures in tests/fixtures/tokenizers/ (tools/make_tokenizer_fixtures.py), laid
out as llama.cpp's convert_hf_to_gguf.py writes that family:

  gemma3  (from gemma)   tokenizer.ggml.model "llama", pre "default", no merges, scores,
                         token types; user-defined whitespace pieces spelled with real spaces;
                         add_space_prefix false; the chat template (Gemma 3's _set_vocab_sentencepiece)
  llama   (from llama2)  "llama", pre "default", no merges; <unk> UNKNOWN, <<SYS>> USER_DEFINED,
                         [PADn] UNUSED padding up to config.json's vocab_size (Llama 2's
                         _set_vocab_sentencepiece)
  llama3  (from llama3)  "gpt2", pre "llama-bpe", merges, CONTROL added tokens (_set_vocab_gpt2)
  qwen2   (from qwen2)   "gpt2", pre "qwen2", merges, <think> USER_DEFINED, [PADn] UNUSED padding,
                         a chat template
  gemma4  (from gemma,   "gemma4", no pre, the tokens of tokenizer.json with scores -1000 and
           re-spelled)   CONTROL/BYTE/NORMAL types (gguf.LlamaHfVocab), Gemma 4's rendered
                         tokens USER_DEFINED, the merges, add_space_prefix false,
                         add_bos_token true, Gemma 4's chat template (Gemma4Model.set_vocab in
                         llama.cpp's conversion/gemma.py at 061b8c5f)

The gemma4 file is the gemma fixture with some of its special tokens renamed to Gemma 4's
(<|turn>, <turn|>, <|channel>, <channel|>, <|tool_call>, <tool_call|>, <|tool_response>, <|"|>)
and named in tokenizer_config.json as model-specific special tokens ("eot_token": "<turn|>",
...), as Gemma 4's tokenizer has them: LlamaHfVocab writes a token CONTROL only when the
tokenizer lists it among its special tokens, and the converter then turns the rendered ones
USER_DEFINED. So the file's end-of-turn token is Gemma 4's <turn|>, CONTROL.

Beyond what the converter would write, gemma3 ends with a normal "▁▁" that collides with the
user-defined "  " (re-spelled "▁▁"), and llama3 with two tokens outside the byte alphabet (one
marked CONTROL): the corners of transformers' conversion that real files can reach.

The SentencePiece families have no tokenizer.model here, so the pieces, scores and types a
SentencePiece model would give are rebuilt from tokenizer.json (score = minus the merge rank
that makes the piece, as SentencePiece BPE models score pieces; 0 for bytes and control
tokens), then tokenizer_config's added tokens are applied as _create_vocab_sentencepiece does.
Special token ids, add_bos/add_eos, merges and the chat template come from gguf.SpecialVocab,
the class llama.cpp itself uses.

Next to each file, reference.json holds what transformers makes of it
(AutoTokenizer.from_pretrained(dir, gguf_file=...)): ids with and without special tokens and
decoded text (with and without skip_special_tokens) for a fixed varied corpus plus seeded random
samples, the added tokens, and the merges' count, head and tail. With --real-gemma PATH (default: the Gemma 3 270M GGUF
under ~/.cache/tpserve/models, skipped if absent) it also writes
tests/fixtures/gguf/gemma3_270m_tokenizer_reference.json for ~40 strings (transformers takes
about 1.5 minutes to convert that 262,144-token vocabulary).

Usage: /work/tools-venv/bin/python tools/make_gguf_tokenizer_fixtures.py [--out tests/fixtures/gguf]
Requires gguf (0.19.0), transformers (5.24.0), tokenizers (0.23.3). Output is deterministic.
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import gguf
import tokenizers
import transformers
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tokenizer_fixtures as base  # noqa: E402  (the shared corpus and sample generator)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL_GEMMA = os.path.expanduser("~/.cache/tpserve/models/gemma-3-270m/gemma-3-270m-q4_k_m.gguf")

CONTROL, USER_DEFINED, NORMAL, UNKNOWN, UNUSED, BYTE = (
    gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED, gguf.TokenType.NORMAL,
    gguf.TokenType.UNKNOWN, gguf.TokenType.UNUSED, gguf.TokenType.BYTE)

# Chat template for the qwen2 fixture (Qwen's is long; this one is enough to check it is carried).
QWEN_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def looks_special(token):
    """convert_hf_to_gguf.py's does_token_look_special."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<\uff5c") and token.endswith("\uff5c>"))
            or (token.startswith("<unused") and token.endswith(">")))


def sentencepiece_vocab(tj, added_tokens_decoder, vocab_size):
    """tokens, scores, types as _create_vocab_sentencepiece writes them, from tokenizer.json."""
    model = tj["model"]
    by_id = {i: t for t, i in model["vocab"].items()}
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    rank = {a + b: r for r, (a, b) in enumerate(merges)}
    alphabet = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1]) if t not in rank]
    char_rank = {t: len(merges) + i for i, t in enumerate(alphabet)}
    specials = {t["content"] for t in tj["added_tokens"] if t["special"]}
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    scores = [-10000.0] * vocab_size
    types = [UNUSED] * vocab_size
    for i in range(len(by_id)):
        piece = by_id[i]
        if piece == model["unk_token"]:
            kind, score = UNKNOWN, 0.0
        elif piece in specials:
            kind, score = CONTROL, 0.0
        elif re.fullmatch(r"<0x[0-9A-F]{2}>", piece):
            kind, score = BYTE, 0.0
        else:
            kind, score = NORMAL, -float(rank.get(piece, char_rank.get(piece, 0)))
        tokens[i], scores[i], types[i] = piece, score, kind
    for key, entry in added_tokens_decoder.items():
        i, token = int(key), entry["content"]
        if entry.get("special") or looks_special(token):
            types[i] = CONTROL
        else:
            token = token.replace("\u2581", " ")  # "pre-normalize user-defined spaces"
            types[i] = USER_DEFINED
        scores[i] = -1000.0
        tokens[i] = token
    return tokens, scores, types


def byte_level_vocab(source_dir, vocab_size):
    """tokens, types as get_vocab_base writes them (transformers loads the tokenizer.json)."""
    tok = AutoTokenizer.from_pretrained(source_dir)
    reverse = {i: t for t, i in tok.vocab.items()}
    added = tok.get_added_vocab()
    decoder = tok.added_tokens_decoder
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
            continue
        token = reverse[i]
        if token in added:
            if not decoder[i].normalized:
                token = tok.decode(tok.encode(token, add_special_tokens=False))
            if decoder[i].special or looks_special(token):
                types.append(CONTROL)
            else:
                token = token.replace("\u2581", " ")
                types.append(USER_DEFINED)
        else:
            types.append(NORMAL)
        tokens.append(token)
    return tokens, types


def stage(source, extra_files):
    """A copy of a tokenizer fixture directory with the files convert_hf_to_gguf.py would also see."""
    tmp = tempfile.mkdtemp()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(source, name)):
            shutil.copy(os.path.join(source, name), tmp)
    for name, obj in extra_files.items():
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            if isinstance(obj, str):
                f.write(obj)
            else:
                json.dump(obj, f, ensure_ascii=False)
    return tmp


def write_gguf(path, arch, model, pre, tokens, types, scores, special_vocab, extra=None):
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(f"tpserve tokenizer fixture ({arch})")
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    if scores is not None:
        writer.add_token_scores(scores)
    writer.add_token_types(types)
    special_vocab.add_to_gguf(writer, quiet=True)
    for add in extra or ():
        add(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()


def make_gemma3(path):
    source = os.path.join(base_dir(), "gemma")
    tj = load(source, "tokenizer.json")
    config = load(source, "tokenizer_config.json")
    staged = stage(source, {})
    tokens, scores, types = sentencepiece_vocab(tj, config["added_tokens_decoder"], max_id(tj) + 1)
    # A normal "▁▁" after the user-defined "  " (which GemmaTokenizer also spells "▁▁"): the
    # vocabulary keeps the later id, as a Python dict does.
    tokens.append("\u2581\u2581")
    scores.append(-float(len(scores)))
    types.append(NORMAL)
    special = gguf.SpecialVocab(staged, n_vocab=len(tokens))
    write_gguf(path, "gemma3", "llama", "default", tokens, types, scores, special,
               [lambda w: w.add_add_space_prefix(False)])
    shutil.rmtree(staged)


def make_llama(path):
    source = os.path.join(base_dir(), "llama2")
    tj = load(source, "tokenizer.json")
    # tokenizer_config.json's added_tokens_decoder, as transformers saves it: <<SYS>> only
    # (Llama 2's own lists <unk>, <s>, </s> too, which would turn <unk> CONTROL).
    decoder = {str(t["id"]): t for t in tj["added_tokens"] if not t["special"]}
    vocab_size = max_id(tj) + 1 + 3  # config.json's vocab_size above the tokenizer's: [PADn]
    tokens, scores, types = sentencepiece_vocab(tj, decoder, vocab_size)
    staged = stage(source, {"config.json": {"vocab_size": vocab_size, "bos_token_id": 1, "eos_token_id": 2}})
    special = gguf.SpecialVocab(staged, n_vocab=len(tokens))
    write_gguf(path, "llama", "llama", "default", tokens, types, scores, special)
    shutil.rmtree(staged)


def make_byte_level(path, source_name, arch, pre, config_json, template=None, extra_tokens=()):
    source = os.path.join(base_dir(), source_name)
    tj = load(source, "tokenizer.json")
    extra = {"config.json": config_json}
    if template is not None:
        extra["chat_template.jinja"] = template
    staged = stage(source, extra)
    tokens, types = byte_level_vocab(staged, config_json["vocab_size"])
    for token, kind in extra_tokens:
        tokens.append(token)
        types.append(kind)
    special = gguf.SpecialVocab(staged, load_merges=True)
    write_gguf(path, arch, "gpt2", pre, tokens, types, None, special)
    shutil.rmtree(staged)


def make_llama3(path):
    tj = load(os.path.join(base_dir(), "llama3"), "tokenizer.json")
    ids = {t["content"]: t["id"] for t in tj["added_tokens"]}
    # Two tokens outside the byte alphabet, as some files have: a control token (a llama.cpp
    # mislabel transformers leaves an ordinary token) and a plain one; both are re-spelled.
    make_byte_level(path, "llama3", "llama", "llama-bpe",
                    {"vocab_size": max_id(tj) + 1, "bos_token_id": ids["<|begin_of_text|>"],
                     "eos_token_id": [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]]},
                    extra_tokens=[("<\uff5cfim\u2581hole\uff5c>", CONTROL), ("caf\u00e9 au lait", NORMAL)])


def make_qwen2(path):
    tj = load(os.path.join(base_dir(), "qwen2"), "tokenizer.json")
    ids = {t["content"]: t["id"] for t in tj["added_tokens"]}
    make_byte_level(path, "qwen2", "qwen2", "qwen2",
                    {"vocab_size": max_id(tj) + 1 + 3, "bos_token_id": ids["<|endoftext|>"],
                     "eos_token_id": ids["<|im_end|>"]}, QWEN_TEMPLATE)


# The gemma fixture's special tokens given Gemma 4's names, by id.
GEMMA4_RENAMES = {5: ("soc_token", "<|channel>"), 6: ("eoc_token", "<channel|>"),
                  7: ("str_token", "<|tool_response>"), 8: ("sot_token", "<|turn>"),
                  9: ("eot_token", "<turn|>"), 10: ("stc_token", "<|tool_call>"),
                  11: ("etc_token", "<tool_call|>"), 16: ("escape_token", '<|"|>')}
# Gemma4Model.set_vocab's visible_tokens: written USER_DEFINED so that llama.cpp renders them.
GEMMA4_VISIBLE = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                  "<tool_response|>", '<|"|>'}


def make_gemma4(path):
    source = os.path.join(base_dir(), "gemma")
    tj = load(source, "tokenizer.json")
    config = load(source, "tokenizer_config.json")
    vocab = tj["model"]["vocab"]
    for entry in tj["added_tokens"]:
        if entry["id"] in GEMMA4_RENAMES:
            key, new = GEMMA4_RENAMES[entry["id"]]
            config[key] = new
            del vocab[entry["content"]]
            vocab[new] = entry["id"]
            entry["content"], entry["special"] = new, True
            config["added_tokens_decoder"][str(entry["id"])].update(content=new, special=True)
    with open(os.path.join(ROOT, "tests", "fixtures", "chat_templates", "gemma4.jinja"), encoding="utf-8") as f:
        template = f.read()
    staged = stage(source, {"tokenizer.json": tj, "tokenizer_config.json": config,
                            "chat_template.jinja": template})
    vocab = gguf.LlamaHfVocab(Path(staged))
    tokens, scores, types = [], [], []
    for text, score, kind in vocab.all_tokens():
        tokens.append(text)
        scores.append(score)
        types.append(USER_DEFINED if text.decode() in GEMMA4_VISIBLE else kind)
    special = gguf.SpecialVocab(staged, load_merges=True)
    write_gguf(path, "gemma4", "gemma4", None, tokens, types, scores, special,
               [lambda w: w.add_add_space_prefix(False), lambda w: w.add_add_bos_token(True)])
    shutil.rmtree(staged)


FIXTURES = {"gemma3": make_gemma3, "llama": make_llama, "llama3": make_llama3, "qwen2": make_qwen2,
            "gemma4": make_gemma4}


def base_dir():
    return os.path.join(ROOT, "tests", "fixtures", "tokenizers")


def load(directory, name):
    with open(os.path.join(directory, name), encoding="utf-8") as f:
        return json.load(f)


def max_id(tj):
    return max(list(tj["model"]["vocab"].values()) + [t["id"] for t in tj["added_tokens"]])


def convert(gguf_path):
    """transformers' tokenizer for a GGUF file, loaded from a directory holding only that file."""
    tmp = tempfile.mkdtemp()
    shutil.copy(gguf_path, os.path.join(tmp, "model.gguf"))
    tok = AutoTokenizer.from_pretrained(tmp, gguf_file="model.gguf")
    shutil.rmtree(tmp)
    return tok


def sample(tok, text):
    with_special = tok.encode(text, add_special_tokens=True)
    return {
        "text": text,
        "ids_with_special": with_special,
        "ids_without_special": tok.encode(text, add_special_tokens=False),
        "decoded": tok.decode(with_special, skip_special_tokens=False),
        "decoded_skip_special": tok.decode(with_special, skip_special_tokens=True),
    }


def reference(tok, name, random_count):
    backend = json.loads(tok.backend_tokenizer.to_str())
    added = backend["added_tokens"]
    # Added tokens the family's text uses, for the samples (a few from each end of the list).
    specials = [t["content"] for t in added if not t["content"].startswith(("<unused", "<|reserved"))]
    specials = specials[:8] + specials[-4:]
    fixed = base.FIXED_SAMPLES + EXTRA_SAMPLES + FAMILY_SAMPLES.get(name, []) + [
        f"{specials[0]}text after{specials[-1]}", " ".join(specials),
        "".join(specials) + "glued" + specials[len(specials) // 2] + " spaced " + specials[-1]]
    texts = fixed + base.random_samples(specials, random_count, seed=sum(map(ord, name)))
    model = backend["model"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    return {
        "transformers_version": transformers.__version__,
        "tokenizers_version": tokenizers.__version__,
        # One more than the largest id (a token the file spells twice leaves a hole).
        "vocab_size": max(list(model["vocab"].values()) + [t["id"] for t in added]) + 1,
        "bos_id": tok.bos_token_id,
        "eos_id": tok.eos_token_id,
        "chat_template": tok.chat_template,
        # Parts of the converted tokenizer.json, to compare the text conversion with.
        "model_vocab_count": len(model["vocab"]),
        "merges_count": len(merges),
        "merges_head": merges[:100],
        "merges_tail": merges[-20:],
        "added_tokens": [[t["id"], t["content"], t["special"]] for t in added],
        "samples": [sample(tok, t) for t in texts],
    }


# Beyond make_tokenizer_fixtures.FIXED_SAMPLES: the tokens the fixtures add to their files.
EXTRA_SAMPLES = [
    "<\uff5cfim\u2581hole\uff5c> and caf\u00e9 au lait",
    "two  spaces, three   spaces, four    spaces",
    "[PAD1161][PAD1328] <<SYS>> <think>",
]

# Beyond those, for one family: Gemma 4's chat and tool-call markup.
FAMILY_SAMPLES = {
    "gemma4": [
        "<bos><|turn>user\nHi there!<turn|>\n<|turn>model\n<|channel>thought\n<channel|>Hello!<turn|>",
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|><|tool_response>',
        "text<turn|>text <|turn> spaced <turn|>  two",
    ],
}

REAL_TEXTS = [
    "", " ", "Hello world", " Hello world", "Hello world ", "  two leading spaces",
    "The quick brown fox jumps over the lazy dog.", "It's we'll they've I'M YOU'RE she'D",
    "人工智能和机器学习", "日本語のテキスト、カタカナ、ひらがな。", "안녕하세요 세계!", "Привет, мир!",
    "مرحبا بالعالم", "😀 emoji 👍🏽 skin tone", "👨‍👩‍👧‍👦 family 🏳️‍🌈 flag", "🇯🇵🇺🇸 flags",
    "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "<html><body><h1>Title</h1></body></html>", "\t\ttabs\tand  spaces   mixed \t \n",
    "   \n\n   ", "line one\nline two\r\nline three\n\n\nfour", "a" * 40, "ab" * 30,
    "Numbers 1234567890 and 3.14159 and 2024-06-01", "Caf\u0065\u0301 vs Café", "\u212b and \ufb01",
    "nbsp\u00a0space, ideographic\u3000space", "zero\u200bwidth\u200djoiner", "a\x00b control \x07 chars",
    "龘靐齉爩", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math letters", "<start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\n",
    "<bos><eos><pad><unk><mask>", "text<end_of_turn>text", "<start_of_image> [multimodal] <unused0>",
    "Ω≈ç√∫˜µ≤≥÷ åß∂ƒ©˙∆˚¬…æ", "https://example.com/a?b=c&d=e#f", "SELECT * FROM t WHERE a >= 18;",
    "   leading spaces and trailing spaces   ",
]


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "gguf"))
    parser.add_argument("--real-gemma", default=REAL_GEMMA)
    parser.add_argument("--random-samples", type=int, default=50)
    args = parser.parse_args()
    for name, make in FIXTURES.items():
        out = os.path.join(args.out, "tokenizers", name)
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, "tokenizer.gguf")
        make(path)
        tok = convert(path)
        write_json(os.path.join(out, "reference.json"), reference(tok, name, args.random_samples))
        sizes = ", ".join(f"{f} {os.path.getsize(os.path.join(out, f)) // 1024} KB" for f in sorted(os.listdir(out)))
        print(f"{name}: {type(tok).__name__}, vocab {len(tok)}; {sizes}")
    if args.real_gemma and os.path.exists(args.real_gemma):
        tok = convert(args.real_gemma)
        model = json.loads(tok.backend_tokenizer.to_str())["model"]
        ref = {"file": os.path.basename(args.real_gemma), "file_bytes": os.path.getsize(args.real_gemma),
               "transformers_version": transformers.__version__,
               "vocab_size": len(tok), "bos_id": tok.bos_token_id, "eos_id": tok.eos_token_id,
               "merges_count": len(model["merges"]),
               "samples": [sample(tok, t) for t in REAL_TEXTS]}
        write_json(os.path.join(args.out, "gemma3_270m_tokenizer_reference.json"), ref)
        print(f"real Gemma 3: {len(REAL_TEXTS)} samples")
    else:
        print(f"real Gemma 3 GGUF not found at {args.real_gemma}: its reference was not rewritten")


if __name__ == "__main__":
    main()
