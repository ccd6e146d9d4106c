# Tokenizer tests: tokenizer.json fixtures under fixtures/tokenizers/ were made by
# tools/make_tokenizer_fixtures.py with the Python `tokenizers` library.
tp_add_test(tokenizer_test SOURCES tokenizer_test.cc LIBS tpserve_tokenizer)
# GGUF tokenizers: fixtures under fixtures/gguf/ were made by tools/make_gguf_tokenizer_fixtures.py
# with transformers; the real Gemma 3 270M file is compared too when TPSERVE_REAL_GGUF names it.
tp_add_test(tokenizer_gguf_test SOURCES tokenizer_gguf_test.cc LIBS tpserve_tokenizer_gguf)
