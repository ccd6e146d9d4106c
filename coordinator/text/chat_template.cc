// ChatTemplate: parse once, render many times. Tested by tests/chat_template_test.cc.
#include "coordinator/text/chat_template.h"

#include "coordinator/text/chat_template_evaluator.h"
#include "coordinator/text/chat_template_parser.h"
#include "coordinator/text/chat_template_value.h"

namespace tpserve {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  auto program = chat_template_internal::ParseTemplate(source);
  if (!program.ok()) return program.status();
  return ChatTemplate(std::shared_ptr<const chat_template_internal::Program>(std::move(*program)),
                      std::make_shared<const std::string>(source));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                                 const ChatTemplateRenderOptions& options) const {
  chat_template_internal::EvalOptions eval;
  eval.now = options.now.value_or(absl::Now());
  eval.time_zone = options.time_zone;
  return chat_template_internal::RenderProgram(
      *program_, chat_template_internal::Value::FromJson(context), eval);
}

}  // namespace tpserve
