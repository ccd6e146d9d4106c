# Structured output (coordinator/structured/): JSON Schema -> grammar -> byte matcher ->
# token masks. Uses the tokenizer fixtures; the real Gemma 3 vocabulary when
# TPSERVE_REAL_GGUF names the GGUF file.
tp_add_test(structured_output_test
  SOURCES structured_output_test.cc structured_output_mask_test.cc
  LIBS tpserve_structured_output tpserve_tokenizer_gguf)
