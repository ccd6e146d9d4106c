// Fuzz target: an OpenAI HTTP request body through ParseOpenAiRequest and, when it parses,
// RequestBuilder::Build (chat template on request-controlled messages and kwargs, then
// tokenization) against a FakeEngine. Replayed by ctest as openai_request_replay.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "coordinator/text/chat_template_loader.h"
#include "coordinator/api/openai_json.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/text/tokenizer.h"
#include "tests/fake_engine.h"
#include "tests/fuzz/fuzz_fixtures.h"

namespace tpserve::fuzz {
namespace {

namespace fs = std::filesystem;

// A served model: what the HTTP server holds for the life of the process.
struct Model {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ModelChatTemplate> chat_template;
  std::unique_ptr<FakeEngine> engine;
  std::unique_ptr<RequestBuilder> builder;
};

Model* MakeModel(const std::string& tokenizer_dir, const std::string& model_dir) {
  auto* m = new Model;
  m->tokenizer = OrDie(Tokenizer::FromFile(Fixture(tokenizer_dir + "/tokenizer.json")), "tokenizer");
  m->chat_template = std::make_unique<ModelChatTemplate>(OrDie(LoadChatTemplate(model_dir), "chat template"));
  FakeEngineOptions options;
  options.max_model_len = 4096;
  m->engine = std::make_unique<FakeEngine>(*m->tokenizer, options);
  m->builder = std::make_unique<RequestBuilder>(*m->engine, *m->tokenizer, m->chat_template.get(),
                                                std::vector<std::string>{"fuzz-model"});
  return m;
}

// Gemma 4's template (tools, reasoning, recursive macros) with its tokenizer, and Qwen 3's
// template with the Qwen 2 tokenizer (byte-level BPE, NFC).
const Model& Models(int i) {
  static const Model* gemma = MakeModel("tokenizers/gemma", Fixture("tokenizers/gemma"));
  static const Model* qwen = [] {
    const fs::path dir = fs::temp_directory_path() / absl::StrCat("tpserve_fuzz_qwen3_", getpid());
    fs::create_directories(dir);
    std::ofstream(dir / "chat_template.jinja") << ReadFile(Fixture("chat_templates/qwen3.jinja"));
    std::ofstream(dir / "tokenizer_config.json") << ReadFile(Fixture("tokenizers/qwen2/tokenizer_config.json"));
    Model* m = MakeModel("tokenizers/qwen2", dir.string());
    fs::remove_all(dir);  // the template is parsed at load
    return m;
  }();
  return i == 0 ? *gemma : *qwen;
}

// Byte 0: bit 0 picks the endpoint (completions / chat completions), bit 1 the model. The
// rest is the request body.
void FuzzOne(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const OpenAiEndpoint endpoint = data[0] & 1 ? OpenAiEndpoint::kChatCompletions : OpenAiEndpoint::kCompletions;
  const Model& model = Models((data[0] >> 1) & 1);
  const absl::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<OpenAiRequest> request = ParseOpenAiRequest(endpoint, body);
  if (!request.ok()) {
    ToHttpError(request.status());  // the error body the client gets
    return;
  }
  absl::StatusOr<ServeRequest> built = model.builder->Build(std::move(request->input), "fuzz-");
  if (!built.ok()) {
    ToHttpError(built.status());
    return;
  }
  for (int32_t id : built->prompt_ids) {
    Check(id >= 0 && id < model.tokenizer->vocab_size(), "Build produced an id outside the vocabulary");
  }
}

}  // namespace
}  // namespace tpserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tpserve::fuzz::FuzzOne(data, size);
  return 0;
}
