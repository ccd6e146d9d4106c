# Chat template tests: templates under fixtures/chat_templates/ are the published ones;
# expected renderings were recorded with transformers by tools/make_chat_template_fixtures.py.
tp_add_test(chat_template_test SOURCES chat_template_test.cc LIBS tpserve_chat_template)
