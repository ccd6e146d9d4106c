# Tool calls (coordinator/text/tool_calls.h): the formats read back from the chat template
# fixtures' renderings and hand-written outputs, whole and streamed; tool_choice schemas.
tp_add_test(tool_call_test SOURCES tool_call_test.cc LIBS tpserve_tool_calls)
# The tool_choice schemas compiled by the structured output grammar compiler.
tp_add_test(tool_choice_grammar_test SOURCES tool_choice_grammar_test.cc
  LIBS tpserve_tool_calls tpserve_structured_output)
