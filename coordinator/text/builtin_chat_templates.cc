// Chat templates for GGUF models whose file carries none, as llama.cpp falls back to a
// built-in template per model family: Gemma 3's published template (google/gemma-3-*-it's
// tokenizer_config.json "chat_template"; the same text as tests/fixtures/chat_templates/
// gemma3.jinja, which tests/chat_template_test.cc compares it with).
#include "coordinator/text/builtin_chat_templates.h"

namespace tpserve {
namespace {

constexpr char kGemma3[] = R"tpl(
{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)tpl";

}  // namespace

std::optional<std::string> BuiltinChatTemplate(absl::string_view architecture) {
  // The raw string starts after its first newline.
  if (architecture == "gemma3") return std::string(kGemma3 + 1, sizeof(kGemma3) - 2);
  return std::nullopt;
}

}  // namespace tpserve
