// Chat template rendering cost against the number of messages, and the cost of refusing a
// chat that cannot fit before its template runs (docs/serving.md, "Bounded work before
// admission"). Measured, never asserted: tests/chat_template_test.cc and
// tests/frontend_test.cc check the behaviour. Times are CPU time of the calling thread, as
// the machines these run on are shared.
//
//   build/bench/chat_render_bench [--fixtures tests/fixtures] [--messages 1000,2000,...]
//                                 [--templates gemma3,gemma4] [--refuse]
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "bench/cpu_time.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/text/chat_template.h"
#include "coordinator/text/chat_template_loader.h"
#include "coordinator/text/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, fixtures, TPSERVE_FIXTURES, "tests/fixtures (chat_templates/, tokenizers/gemma/)");
ABSL_FLAG(std::vector<std::string>, messages, std::vector<std::string>({"1000", "2000", "4000", "8000", "10000"}),
          "message counts to render");
ABSL_FLAG(std::vector<std::string>, templates, std::vector<std::string>({"gemma3", "gemma4"}),
          "fixture templates (tests/fixtures/chat_templates/<name>.jinja)");
ABSL_FLAG(bool, refuse, true, "also time RequestBuilder refusing a 10,000-message chat");
ABSL_FLAG(int64_t, max_model_len, 8192, "max_model_len of the engine the refused chat is built for");

namespace tpserve {
namespace {

using bench::ThreadCpuSeconds;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// `n` alternating user/assistant messages of ~35 bytes of JSON each: 10,000 of them make
// the ~350 KB chat of issue 16.
nlohmann::ordered_json Chat(int n) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (int i = 0; i < n; ++i) {
    messages.push_back({{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", std::to_string(i)}});
  }
  return messages;
}

void BenchRender(const std::string& fixtures) {
  std::printf("render N messages (CPU time per render; us/message stays flat when linear)\n");
  for (const std::string& name : absl::GetFlag(FLAGS_templates)) {
    auto t = ChatTemplate::Parse(ReadText(fixtures + "/chat_templates/" + name + ".jinja"));
    if (!t.ok()) {
      std::printf("  %s: %s\n", name.c_str(), std::string(t.status().message()).c_str());
      continue;
    }
    for (const std::string& count : absl::GetFlag(FLAGS_messages)) {
      const int n = std::stoi(count);
      nlohmann::ordered_json context = {
          {"messages", Chat(n)}, {"bos_token", "<bos>"}, {"add_generation_prompt", true}};
      const double start = ThreadCpuSeconds();
      absl::StatusOr<std::string> text = t->Render(context);
      const double s = ThreadCpuSeconds() - start;
      std::printf("  %-7s %6d messages  %9.1f ms  %7.2f us/message  %s\n", name.c_str(), n, s * 1e3,
                  s / n * 1e6,
                  text.ok() ? (std::to_string(text->size()) + " bytes").c_str()
                            : std::string(text.status().message()).c_str());
    }
  }
}

// An EngineApi that only answers Info(): RequestBuilder reads max_model_len from it.
class InfoOnlyEngine : public EngineApi {
 public:
  explicit InfoOnlyEngine(int64_t max_model_len) {
    info_.served_model_name = "bench";
    info_.max_model_len = max_model_len;
  }
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(ServeRequest) override {
    return absl::UnimplementedError("chat_render_bench does not run requests");
  }
  EngineStats Stats() const override { return {}; }
  const ModelInfo& Info() const override { return info_; }
  bool Ready() const override { return true; }

 private:
  ModelInfo info_;
};

void BenchRefusal(const std::string& fixtures) {
  const std::string dir = fixtures + "/tokenizers/gemma";
  auto tokenizer = Tokenizer::FromFile(dir + "/tokenizer.json");
  auto chat_template = LoadChatTemplate(dir);
  if (!tokenizer.ok() || !chat_template.ok()) {
    std::printf("cannot load %s: %s\n", dir.c_str(),
                std::string((tokenizer.ok() ? chat_template.status() : tokenizer.status()).message()).c_str());
    return;
  }
  const int64_t max_model_len = absl::GetFlag(FLAGS_max_model_len);
  InfoOnlyEngine engine(max_model_len);
  RequestBuilder builder(engine, **tokenizer, &*chat_template, {});
  GenerateInput input;
  ChatPrompt chat;
  chat.messages = Chat(10000);
  input.prompt = chat;
  const size_t bytes = chat.messages.dump().size();
  const double start = ThreadCpuSeconds();
  absl::StatusOr<ServeRequest> request = builder.Build(input, "bench-");
  const double s = ThreadCpuSeconds() - start;
  std::printf("RequestBuilder, 10000 messages (%zu bytes of JSON), gemma fixture model, max_model_len %lld:\n"
              "  %.1f ms  %s\n",
              bytes, static_cast<long long>(max_model_len), s * 1e3,
              request.ok() ? "accepted" : std::string(request.status().message()).substr(0, 160).c_str());
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string fixtures = absl::GetFlag(FLAGS_fixtures);
  tpserve::BenchRender(fixtures);
  if (absl::GetFlag(FLAGS_refuse)) tpserve::BenchRefusal(fixtures);
  return 0;
}
