// Built-in chat templates by model family, for model files that carry none (a GGUF file
// without tokenizer.chat_template). Tested by tests/chat_template_test.cc.
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tpserve {

// The family's published template ("gemma3": Gemma 3's), or nullopt for a family without one.
std::optional<std::string> BuiltinChatTemplate(absl::string_view architecture);

}  // namespace tpserve
