// A model held as one GGUF file (llama.cpp's format): its config read off the metadata and its
// weights as a WeightSource that dequantizes each rank's slice at load, under the engine's
// (Hugging Face) tensor names. Architectures: gemma3, gemma4 (worker/gguf_gemma4.h), llama,
// qwen2, qwen3. Tested by tests/gguf_test.cc and tests/model_test.cc (Gguf/*: transformers'
// logits on the same files).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/gguf_file.h"
#include "worker/model_config.h"
#include "worker/weight_source.h"

namespace tpserve {

// Whether --model names a GGUF model: a *.gguf file, or a directory with no config.json that
// holds a *.gguf file.
bool IsGgufModelPath(const std::string& model_path);

// The GGUF file behind --model (--load-format gguf, or auto and IsGgufModelPath), opened
// once, so that start-up reads the config, the weights, the tokenizer and the sampling
// defaults from one parse of it. Null for a model that is not GGUF.
absl::StatusOr<std::shared_ptr<const GgufFile>> OpenGgufModel(const std::string& model_path,
                                                              const std::string& load_format);

// The config.json that describes the file's model, as transformers' GGUF loader and llama.cpp
// read the metadata (the defaults llama.cpp hard-codes, e.g. Gemma 3's sliding-window
// pattern, written out). An unsupported architecture is an error naming it.
absl::StatusOr<std::string> GgufConfigJson(const GgufFile& file);
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file);

// The file's tensors under the engine's names, dequantized to the requested dtype. Undoes
// what llama.cpp's converter did to them: Llama's q/k rows interleaved for its rotary
// layout, Gemma 3's norm weights stored as 1 + w (Gemma 4's are stored as they are).
absl::StatusOr<std::unique_ptr<WeightSource>> OpenGgufSource(std::shared_ptr<const GgufFile> file);

}  // namespace tpserve
