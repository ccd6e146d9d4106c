# Tokenizer tests: tokenizer.json fixtures under fixtures/tokenizers/ were made by
# tools/make_tokenizer_fixtures.py with the Python `tokenizers` library.
tp_add_test(tokenizer_test SOURCES tokenizer_test.cc LIBS tpserve_tokenizer)
