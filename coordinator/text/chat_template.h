// Renders Hugging Face chat templates (Jinja2 programs) byte for byte as transformers'
// apply_chat_template does. Tested by tests/chat_template_test.cc against outputs that
// tools/make_chat_template_fixtures.py recorded with transformers itself.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace tpserve {

namespace chat_template_internal {
struct Program;
}  // namespace chat_template_internal

struct ChatTemplateRenderOptions {
  // What strftime_now() formats (Llama 3.2 puts today's date in its system prompt).
  // Absent: the current time.
  std::optional<absl::Time> now;
  absl::TimeZone time_zone = absl::LocalTimeZone();
};

// A parsed template: a Jinja2 subset interpreter with the settings transformers uses
// (trim_blocks, lstrip_blocks, an immutable sandbox, loop controls, its tojson,
// raise_exception, strftime_now and namespace). Copies share the parsed program;
// Render is const and thread-safe.
class ChatTemplate {
 public:
  // Syntax errors, unknown tags and unknown filters or tests are InvalidArgument errors
  // naming line and column, e.g. "chat template syntax error at line 3, column 12: ...".
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  // `context` is an object whose entries become the template's variables, e.g.
  // {"messages": [...], "add_generation_prompt": true, "bos_token": "<bos>"}. Pass an
  // ordered_json to keep the key order of tool schemas and arguments as the client sent
  // them (tojson prints dicts in insertion order); an nlohmann::json converts implicitly,
  // with its keys sorted. Errors name line and column; an error raised by the template's
  // own raise_exception() reads "chat template raised an exception at line L, column C:
  // <the template's message>".
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const ChatTemplateRenderOptions& options = {}) const;

  // The template's text (e.g. to tell which tool-call syntax it writes).
  const std::string& source() const { return *source_; }

 private:
  ChatTemplate(std::shared_ptr<const chat_template_internal::Program> program, std::shared_ptr<const std::string> source)
      : program_(std::move(program)), source_(std::move(source)) {}

  std::shared_ptr<const chat_template_internal::Program> program_;
  std::shared_ptr<const std::string> source_;
};

}  // namespace tpserve
