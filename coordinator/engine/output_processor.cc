// Engine outputs -> stream events, on the processor's thread. Tested by
// tests/serving_engine_test.cc.
#include "coordinator/engine/output_processor.h"

#include <utility>

namespace tpserve {

struct OutputProcessor::State {
  State(const Tokenizer& tokenizer, const SamplingParams& params)
      : decoder(tokenizer, params.skip_special_tokens), stop(params) {}
  std::string request_id;
  std::shared_ptr<RequestStream> stream;
  IncrementalDecoder decoder;
  StopChecker stop;  // stop strings
  int32_t num_prompt_tokens = 0;
  bool done = false;  // the final event was sent
};

OutputProcessor::OutputProcessor(const Tokenizer& tokenizer, std::function<void(const std::string&)> abort)
    : tokenizer_(tokenizer), abort_(std::move(abort)) {
  thread_ = std::thread([this] { Run(); });
}

OutputProcessor::~OutputProcessor() { Close(); }

void OutputProcessor::Add(const std::string& request_id, std::shared_ptr<RequestStream> stream,
                          const SamplingParams& params, int32_t num_prompt_tokens) {
  auto state = std::make_shared<State>(tokenizer_, params);
  state->request_id = request_id;
  state->stream = std::move(stream);
  state->num_prompt_tokens = num_prompt_tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(state));
  }
  cv_.notify_one();
}

void OutputProcessor::Process(std::vector<EngineOutput> outputs) {
  if (outputs.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(outputs));
  }
  cv_.notify_one();
}

void OutputProcessor::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void OutputProcessor::Run() {
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || closed_; });
      if (queue_.empty()) return;  // closed and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    if (auto* state = std::get_if<std::shared_ptr<State>>(&item)) {
      requests_[(*state)->request_id] = std::move(*state);
      continue;
    }
    for (EngineOutput& o : std::get<std::vector<EngineOutput>>(item)) Handle(o);
  }
}

void OutputProcessor::Handle(EngineOutput& o) {
  auto it = requests_.find(o.request_id);
  if (it == requests_.end()) return;
  State& s = *it->second;
  if (!s.done) {
    OutputEvent e;
    e.prompt_tokens = s.num_prompt_tokens;
    e.completion_tokens = o.num_output_tokens;
    e.timings = o.timings;
    FinishReason finish = FinishReason::kNone;
    // Each new token through the decoder and the stop strings. A token the engine stopped
    // on (a stop token id or EOS: the last of an output that ends with kStop) is not
    // emitted as text; a stop string ends the stream here.
    for (size_t i = 0; i < o.token_ids.size() && finish == FinishReason::kNone; ++i) {
      const int32_t id = o.token_ids[i];
      e.token_ids.push_back(id);
      if (i < o.logprobs.size()) e.logprobs.push_back(std::move(o.logprobs[i]));
      const std::string delta = s.decoder.Push(id);
      if (o.finish == FinishReason::kStop && i + 1 == o.token_ids.size()) continue;
      StopUpdate u = s.stop.Push(delta);
      e.text += u.text;
      finish = u.finish_reason;
      e.stop_string = std::move(u.stop_string);
    }
    if (finish == FinishReason::kNone && o.finish != FinishReason::kNone) {
      // Ended by the engine: a stop token, max_tokens, a cancel or a failure. Held-back
      // text goes out, except after an error.
      finish = o.finish;
      e.error = o.error;
      e.stop_token_id = o.stop_token_id;
      if (finish != FinishReason::kError) e.text += s.stop.Flush();
    }
    e.finish = finish;
    s.done = finish != FinishReason::kNone;
    s.stream->Push(std::move(e));
    // A stop string the engine does not know about: it stops generating at its next step.
    if (s.done && o.finish == FinishReason::kNone) abort_(s.request_id);
  }
  if (o.finish != FinishReason::kNone) requests_.erase(it);
}

}  // namespace tpserve
