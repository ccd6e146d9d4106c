#!/usr/bin/env python3
"""Builds the tokenizer fixtures under tests/fixtures/tokenizers/ for tests/tokenizer_test.cc.

Real Gemma/Llama/Qwen tokenizers cannot be downloaded here (and are tens of MB), so this
trains small BPE vocabularies (a few thousand tokens) on a built-in multilingual corpus
with the Python `tokenizers` library and writes tokenizer.json files whose
normalizer / pre_tokenizer / post_processor / decoder / model options have the same
structure as the published files of each family (as transformers' converters write
them). For each fixture it also writes reference.json: token ids with and without
special tokens and decoded text for a fixed sample set plus seeded random samples, all
computed by `tokenizers` itself.

Usage: python3 tools/make_tokenizer_fixtures.py [--out tests/fixtures/tokenizers]
Requires: pip install tokenizers (tested with 0.23.3). Output is deterministic.
"""

import argparse
import collections
import json
import os
import random

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Training text: prose, code, CJK, other scripts, emoji and whitespace layouts.
CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's a test; we'll see what they've done.",
    "Tokenizers split text into pieces that a language model can read. Each piece has an id.",
    "In 2024 the model served 1,234,567 requests at 42.5 ms median latency and 99.9% uptime.",
    "She said: \"Don't worry, I'M fine.\" He replied, 'You're RIGHT, we'd better go!'",
    "Serving large language models with tensor parallelism splits every layer across GPUs.",
    "The scheduler decides which sequences run; the workers only execute the plan they get.",
    "Hello world! Hello, World? hello... HELLO!!! Goodbye, cruel world.",
    "def encode(self, text: str) -> list[int]:\n    ids = []\n    for word in text.split():\n"
    "        ids.extend(self.vocab[word])\n    return ids\n",
    "int main(int argc, char** argv) {\n  std::vector<int> v = {1, 2, 3};\n"
    "  for (int x : v) printf(\"%d\\n\", x);\n  return 0;\n}\n",
    "if (a && b || !c) { x += 1; } else { y -= 2; }  // comment\n\t\treturn x * y;\n",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name ORDER BY 2 DESC;",
    "<html><body><h1>Title</h1><p>Paragraph with <b>bold</b> text.</p></body></html>",
    "    indented line\n        more indented\n\n\n\ttab\tseparated\tvalues\n",
    "人工智能是计算机科学的一个分支，它试图理解智能的本质。我们今天学习中文。",
    "大型语言模型通过张量并行在多个图形处理器上运行。北京是中国的首都。",
    "機械学習は人工知能の一分野です。東京は日本の首都です。ひらがなとカタカナ。",
    "こんにちは、世界！今日はいい天気ですね。ありがとうございます。",
    "안녕하세요 세계! 한국어 텍스트도 포함되어 있습니다.",
    "Привет, мир! Это пример текста на русском языке для обучения.",
    "Γειά σου Κόσμε! Ελληνικά γράμματα: α β γ δ ε.",
    "Café, naïve, résumé, façade, jalapeño, Zürich, São Paulo, Ærøskøbing.",
    "مرحبا بالعالم! هذا نص عربي.",
    "Emoji: 😀 😃 😄 🙂 👍 🎉 🚀 ❤️ 🔥 ✨ and more 😀😀😀 in a row.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14159 2.71828 -17 +42 1e10",
    "Mixed: GPU0 GPU1 rank=3 world_size=8 tp_size=4 batch_size=256 lr=3e-4",
    "   leading spaces and trailing spaces   ",
    "line one\nline two\r\nline three\n\nline five after a blank line",
    "a  b   c    d     e      f       g (runs of spaces)",
    "The end. Fin. 终。終わり。Конец.",
]

FIXED_SAMPLES = [
    "",
    " ",
    "Hello world",
    " Hello world",
    "Hello world ",
    "   leading and trailing   ",
    "Hello\nworld\n\n\nthree newlines\r\nand CRLF",
    "\t\ttabs\tand  spaces   mixed \t \n",
    "   \n\n   ",
    "人工智能和机器学习",
    "龘靐齉爩",  # rare CJK, not in the training corpus
    "日本語のテキスト、カタカナ、ひらがな。",
    "😀 emoji 👍🏽 skin tone",
    "👨‍👩‍👧‍👦 family (ZWJ sequence) 🏳️‍🌈 flag",
    "🦩🪼🫠 newer emoji not in the vocab",
    "🇯🇵🇺🇸 regional indicator flags",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "It's we'll they've I'M YOU'RE she'D",
    "Numbers 1234567890 and 3.14159 and 2024-06-01",
    "Caf\u0065\u0301 vs Café (combining accent, NFC-sensitive)",
    "\u212b Angstrom sign and \ufb01 ligature",
    "nbsp\u00a0space, ideographic\u3000space, nel\u0085char",
    "zero\u200bwidth\u200djoiner",
    "ſ long s and ﬀ",
    "a\x00b control \x07 chars",
    "Ω≈ç√∫˜µ≤≥÷ åß∂ƒ©˙∆˚¬…æ",
    "a  <mask> b, x [TOOL]   y, cat concatenate cat. <s>cat</s>",  # lstrip/rstrip/single_word
    "<start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\n",
    "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|><|start_header_id|>assistant",
    "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "x" * 300,
    "ab" * 50 + " " + "😀" * 20,
]

# Fragments for seeded random samples (special-token strings are added per fixture).
FRAGMENTS = [
    "hello", "world", "Hello", "WORLD", "the", "tokenizer", "GPU", "rank", "it's", "we'll",
    "人工智能", "中文", "東京", "ひらがな", "カタカナ", "한국어", "мир", "Café", "naïve", "Zürich",
    "😀", "👍🏽", "🚀", "❤️", "👨‍👩‍👧", "🦩", "🇯🇵", "✨",
    "0", "42", "3.14", "1234567", "2024", "-17",
    "def", "return", "{", "}", "(x)", "[i]", "==", "->", "//", "#", "\"quoted\"", "'single'",
    "<b>", "</p>", "&amp;", "@user", "https://example.com/a?b=c",
    "e\u0301", "\u00a0", "\u3000", "\u0085", "\u200b", "龘", "靐",
]
SEPARATORS = ["", " ", " ", " ", "  ", "\n", "\n\n", "\t", " \t ", "\r\n", "   "]


def train_bpe(pre_tokenizer, normalizer, vocab_size, limit_alphabet=None, initial_alphabet=()):
    """Returns (vocab dict, merges list of pairs) from a BPE trained on CORPUS."""
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    initial_alphabet = list(initial_alphabet)
    if limit_alphabet is not None:
        # The trainer breaks ties between equally frequent characters arbitrarily; pick
        # the alphabet here (most frequent first, then by code point) to stay deterministic.
        counts = collections.Counter()
        for line in CORPUS:
            text = normalizer.normalize_str(line) if normalizer is not None else line
            for piece, _ in pre_tokenizer.pre_tokenize_str(text):
                counts.update(piece)
        initial_alphabet = sorted(counts, key=lambda c: (-counts[c], c))[:limit_alphabet]
    kwargs = dict(vocab_size=vocab_size, show_progress=False, initial_alphabet=initial_alphabet)
    if limit_alphabet is not None:
        kwargs["limit_alphabet"] = len(initial_alphabet)
    tok.train_from_iterator(CORPUS * 3, trainers.BpeTrainer(**kwargs))
    model = json.loads(tok.to_str())["model"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    return model["vocab"], merges


def added(token_id, content, special=True, normalized=False, lstrip=False, rstrip=False,
          single_word=False):
    return {"id": token_id, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def bpe_model(vocab, merges, *, unk=None, fuse_unk=False, byte_fallback=False,
              ignore_merges=False, merges_as_strings=False, empty_affixes=False):
    return {
        "type": "BPE", "dropout": None, "unk_token": unk,
        "continuing_subword_prefix": "" if empty_affixes else None,
        "end_of_word_suffix": "" if empty_affixes else None,
        "fuse_unk": fuse_unk, "byte_fallback": byte_fallback, "ignore_merges": ignore_merges,
        "vocab": vocab,
        "merges": [" ".join(m) for m in merges] if merges_as_strings else [list(m) for m in merges],
    }


def template(bos):
    return {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos[0], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos[0], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": bos[0], "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos[0]: {"id": bos[0], "ids": [bos[1]], "tokens": [bos[0]]}},
    }


def replace(pattern, content):
    return {"type": "Replace", "pattern": {"String": pattern}, "content": content}


def byte_level(add_prefix_space, trim_offsets, use_regex):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": use_regex}


def split_regex(pattern):
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def spm_vocab(head, trained_vocab, user_defined=()):
    """SentencePiece-style layout: special tokens, user-defined pieces, <0xNN> bytes, pieces."""
    vocab = {}
    for token in list(head) + list(user_defined) + [f"<0x{b:02X}>" for b in range(256)]:
        vocab[token] = len(vocab)
    for token, _ in sorted(trained_vocab.items(), key=lambda kv: kv[1]):
        if token not in vocab:
            vocab[token] = len(vocab)
    return vocab


def tokenizer_json(added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
            "decoder": decoder, "model": model}


def make_gemma():
    """Gemma 3 / Gemma 4: SentencePiece BPE with byte fallback, spaces as "▁".

    As transformers' GemmaConverter / GemmaTokenizer write it: normalizer Replace(" ", "▁"),
    pre_tokenizer Split(" ", MergedWithPrevious) (a no-op after the normalizer), decoder
    Replace("▁", " ") + ByteFallback + Fuse, BPE with unk "<unk>", fuse_unk and byte_fallback,
    TemplateProcessing "<bos> $A"; SentencePiece user-defined pieces are non-special added
    tokens, control tokens special ones.
    """
    vocab_t, merges = train_bpe(pre_tokenizers.Split("▁", "merged_with_next"),
                                normalizers.Replace(" ", "▁"), 2500, limit_alphabet=400)
    head = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]", "<unused0>", "<unused1>",
            "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"]
    user_defined = ["\n\n", "\n\n\n", "<h1>", "</h1>", "<table>", "</table>", "▁▁"]
    vocab = spm_vocab(head, vocab_t, user_defined)
    added_tokens = [added(vocab[t], t) for t in head] + \
        [added(vocab[t], t, special=False) for t in user_defined]
    tj = tokenizer_json(
        added_tokens, replace(" ", "▁"),
        {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False},
        template(("<bos>", vocab["<bos>"])),
        {"type": "Sequence", "decoders": [replace("▁", " "), {"type": "ByteFallback"}, {"type": "Fuse"}]},
        bpe_model(vocab, merges, unk="<unk>", fuse_unk=True, byte_fallback=True))
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>", "eos_token": "<eos>",
              "pad_token": "<pad>", "unk_token": "<unk>", "tokenizer_class": "GemmaTokenizer",
              "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                       for t in added_tokens}}
    generation = {"bos_token_id": vocab["<bos>"], "eos_token_id": [vocab["<eos>"], vocab["<end_of_turn>"]]}
    return tj, config, generation


def make_llama2():
    """Llama 2 (legacy): Prepend+Replace normalizer, Strip decoder, BOS from tokenizer_config."""
    vocab_t, merges = train_bpe(pre_tokenizers.Split("▁", "merged_with_next"),
                                normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]),
                                900, limit_alphabet=200)
    vocab = spm_vocab(["<unk>", "<s>", "</s>"], vocab_t)
    vocab["<<SYS>>"] = len(vocab)
    added_tokens = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>"),
                    added(vocab["<<SYS>>"], "<<SYS>>", special=False, normalized=True)]
    tj = tokenizer_json(
        added_tokens,
        {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, replace(" ", "▁")]},
        None, None,
        {"type": "Sequence", "decoders": [replace("▁", " "), {"type": "ByteFallback"}, {"type": "Fuse"},
                                          {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        bpe_model(vocab, merges, unk="<unk>", fuse_unk=True, byte_fallback=True, merges_as_strings=True))
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
              "unk_token": "<unk>", "legacy": True, "tokenizer_class": "LlamaTokenizer"}
    return tj, config, None


def make_mistral():
    """Mistral-style: Metaspace(prepend_scheme=first, split=false), lstrip/rstrip/single_word tokens."""
    vocab_t, merges = train_bpe(pre_tokenizers.Metaspace(prepend_scheme="always", split=True), None,
                                900, limit_alphabet=200)
    vocab = spm_vocab(["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "<mask>", "[TOOL]"], vocab_t)
    added_tokens = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>"), added(3, "[INST]"),
                    added(4, "[/INST]"), added(5, "<mask>", lstrip=True),
                    added(6, "[TOOL]", special=False, rstrip=True),
                    added(vocab.setdefault("cat", len(vocab)), "cat", special=False, single_word=True)]
    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    tj = tokenizer_json(added_tokens, None, metaspace, template(("<s>", 1)), dict(metaspace),
                        bpe_model(vocab, merges, unk="<unk>", byte_fallback=True))
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    return tj, config, None


def make_llama3():
    """Llama 3: Split(regex) + ByteLevel, ignore_merges, TemplateProcessing with <|begin_of_text|>."""
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    vocab, merges = train_bpe(pre, None, 2500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    added_tokens = [added(len(vocab) + i, n) for i, n in enumerate(names)]
    ids = {n: len(vocab) + i for i, n in enumerate(names)}
    post = {"type": "Sequence", "processors": [byte_level(True, False, True),
                                               template(("<|begin_of_text|>", ids["<|begin_of_text|>"]))]}
    tj = tokenizer_json(
        added_tokens, None,
        {"type": "Sequence", "pretokenizers": [split_regex(LLAMA3_PATTERN), byte_level(False, True, False)]},
        post, byte_level(True, True, True),
        bpe_model(vocab, merges, ignore_merges=True, merges_as_strings=True))
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
              "tokenizer_class": "PreTrainedTokenizerFast"}
    generation = {"bos_token_id": ids["<|begin_of_text|>"],
                  "eos_token_id": [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]]}
    return tj, config, generation


def make_qwen2():
    """Qwen2/2.5/3: NFC, Split(regex with single digits) + ByteLevel, no BOS, <think> not special."""
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PATTERN), "isolated"),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    vocab, merges = train_bpe(pre, normalizers.NFC(), 2500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    names = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
             ("<|object_ref_start|>", True), ("<tool_call>", False), ("</tool_call>", False),
             ("<think>", False), ("</think>", False)]
    added_tokens = [added(len(vocab) + i, n, special=s) for i, (n, s) in enumerate(names)]
    bl = byte_level(False, False, False)
    tj = tokenizer_json(
        added_tokens, {"type": "NFC"},
        {"type": "Sequence", "pretokenizers": [split_regex(QWEN2_PATTERN), bl]},
        dict(bl), dict(bl), bpe_model(vocab, merges, empty_affixes=True))
    config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "add_prefix_space": False, "errors": "replace", "tokenizer_class": "Qwen2Tokenizer"}
    return tj, config, None


def make_gpt2():
    """GPT-2: ByteLevel(use_regex=true) pre-tokenizer, no normalizer, no BOS."""
    vocab, merges = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), None, 900,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    added_tokens = [added(len(vocab), "<|endoftext|>")]
    tj = tokenizer_json(added_tokens, None, byte_level(False, True, True), byte_level(True, True, True),
                        byte_level(True, True, True),
                        bpe_model(vocab, merges, merges_as_strings=True, empty_affixes=True))
    return tj, None, None


FIXTURES = {
    "gemma": make_gemma,
    "llama2": make_llama2,
    "mistral": make_mistral,
    "llama3": make_llama3,
    "qwen2": make_qwen2,
    "gpt2": make_gpt2,
}


def effective_tokenizer(tj, config):
    """The tokenizer transformers would run: add_bos_token/add_eos_token in the config
    replace the post-processor with [bos] $A [eos] (TokenizersBackend.update_post_processor)."""
    tok = Tokenizer.from_str(json.dumps(tj))
    if config and ("add_bos_token" in config or "add_eos_token" in config):
        bos, eos = config.get("bos_token"), config.get("eos_token")
        add_bos = bool(config.get("add_bos_token")) and bos is not None
        add_eos = bool(config.get("add_eos_token")) and eos is not None
        single = (f"{bos} " if add_bos else "") + "$A" + (f" {eos}" if add_eos else "")
        specials = ([(bos, tok.token_to_id(bos))] if add_bos else []) + \
                   ([(eos, tok.token_to_id(eos))] if add_eos else [])
        tok.post_processor = tokenizers.processors.TemplateProcessing(single=single, special_tokens=specials)
    return tok


def random_samples(specials, count, seed):
    rng = random.Random(seed)
    pool = FRAGMENTS + specials
    out = []
    for _ in range(count):
        parts = [rng.choice(pool) for _ in range(rng.randint(1, 10))]
        text = rng.choice(["", " ", "\n"]) if rng.random() < 0.2 else ""
        for part in parts:
            text += part + rng.choice(SEPARATORS)
        out.append(text)
    return out


def reference(tok, tj, config, generation, name):
    specials = [t["content"] for t in tj["added_tokens"]]
    fixed = FIXED_SAMPLES + [f"{specials[0]}text after{specials[-1]}", " ".join(specials),
                             "".join(specials) + "glued" + specials[len(specials) // 2] + " spaced " + specials[-1]]
    samples = []
    for text in fixed + random_samples(specials, 120, seed=sum(map(ord, name))):
        with_special = tok.encode(text, add_special_tokens=True).ids
        samples.append({
            "text": text,
            "ids_with_special": with_special,
            "ids_without_special": tok.encode(text, add_special_tokens=False).ids,
            "decoded": tok.decode(with_special, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(with_special, skip_special_tokens=True),
        })
    ids = list(tj["model"]["vocab"].values()) + [t["id"] for t in tj["added_tokens"]]
    # bos: the config's bos_token, else the token tokenizer.json's template starts with.
    bos = None
    processor = tj["post_processor"] or {}
    if processor.get("type") == "Sequence":
        processor = next((p for p in processor["processors"] if p["type"] == "TemplateProcessing"), {})
    if processor.get("type") == "TemplateProcessing" and "SpecialToken" in processor["single"][0]:
        bos = processor["special_tokens"][processor["single"][0]["SpecialToken"]["id"]]["ids"][0]
    eos_ids = []
    if config and config.get("bos_token") is not None:
        bos = tok.token_to_id(config["bos_token"])
    if config and config.get("eos_token") is not None:
        eos_ids.append(tok.token_to_id(config["eos_token"]))
    for e in (generation or {}).get("eos_token_id", []):
        if e not in eos_ids:
            eos_ids.append(e)
    return {
        "tokenizers_version": tokenizers.__version__,
        "vocab_size": max(ids) + 1,
        "bos_id": bos,
        "eos_ids": eos_ids,
        "special_ids": sorted(t["id"] for t in tj["added_tokens"] if t["special"]),
        "added_token_strings": {str(t["id"]): tok.id_to_token(t["id"]) for t in tj["added_tokens"]},
        "samples": samples,
    }


def write_json(path, obj, compact=False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "tokenizers"))
    args = parser.parse_args()
    for name, make in FIXTURES.items():
        tj, config, generation = make()
        tok = effective_tokenizer(tj, config)  # also validates the JSON with `tokenizers`
        out = os.path.join(args.out, name)
        os.makedirs(out, exist_ok=True)
        write_json(os.path.join(out, "tokenizer.json"), tj, compact=True)
        for file_name, obj in (("tokenizer_config.json", config), ("generation_config.json", generation)):
            path = os.path.join(out, file_name)
            if obj is not None:
                write_json(path, obj)
            elif os.path.exists(path):
                os.remove(path)
        ref = reference(tok, tj, config, generation, name)
        write_json(os.path.join(out, "reference.json"), ref, compact=True)
        sizes = ", ".join(f"{f} {os.path.getsize(os.path.join(out, f)) // 1024} KB" for f in sorted(os.listdir(out)))
        print(f"{name}: vocab {ref['vocab_size']}, {len(ref['samples'])} samples; {sizes}")


if __name__ == "__main__":
    main()
