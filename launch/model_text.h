// The text side of --model, shared by `generate` and `serve`: the tokenizer and the chat
// template, from --tokenizer, a GGUF file's metadata, or the checkpoint directory.
// Tested by tests/cli_test.sh and tests/real_model_test.sh.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/engine/generation_defaults.h"
#include "coordinator/text/chat_template_loader.h"
#include "coordinator/text/tokenizer.h"
#include "worker/gguf_file.h"

namespace tpserve {

struct ModelText {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ModelChatTemplate> chat;  // null when the model has none
  absl::Status chat_status;                 // why there is none
  std::string source;                       // where the tokenizer came from, for logs
};

// --tokenizer PATH (its directory's chat template) wins; else a GGUF model's metadata (its
// tokenizer.chat_template, else the family's built-in template); else MODEL/tokenizer.json
// and MODEL's chat template. `with_chat` false skips the template. `gguf`: the model's GGUF
// file when the caller opened it already (OpenGgufModel), else null.
absl::StatusOr<ModelText> LoadModelText(const std::string& model, const std::string& tokenizer_path, bool with_chat,
                                        const GgufFile* gguf = nullptr);

// Whether LoadModelText has a tokenizer to load without --tokenizer.
bool ModelHasTokenizer(const std::string& model);

// --generation-config's defaults (LoadGenerationDefaults); for a GGUF model under "auto" with
// no generation_config.json beside it, the file's general.sampling.* metadata (temp, top_k,
// top_p, min_p, penalty_repeat), which llama.cpp's converter writes from the same file.
absl::StatusOr<GenerationDefaults> LoadModelGenerationDefaults(const std::string& generation_config,
                                                               const std::string& model,
                                                               const GgufFile* gguf = nullptr);

}  // namespace tpserve
