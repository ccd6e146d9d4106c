// The text side of serving, on a thread of its own (vLLM v1's output processor): turns
// the engine core's per-step outputs into each request's stream events: detokenizing,
// stop strings (held back across deltas, never emitted), logprobs and timings. A stop
// string ends the stream at once and goes back to the engine as an abort, which the
// engine applies at its next step boundary. The engine thread does no text work.
// Tested by tests/serving_engine_test.cc.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "coordinator/engine/engine_core.h"
#include "coordinator/engine/request.h"
#include "coordinator/engine/stop_checker.h"
#include "coordinator/text/tokenizer.h"
#include "coordinator/text/tokenizer_incremental_decoder.h"

namespace tpserve {

class OutputProcessor {
 public:
  // `abort` is called (on this processor's thread) with the id of a request whose stop
  // string matched while the engine may still be running it.
  OutputProcessor(const Tokenizer& tokenizer, std::function<void(const std::string&)> abort);
  ~OutputProcessor();  // Close()s

  // Engine thread. Add() before any output of the request; outputs in step order.
  void Add(const std::string& request_id, std::shared_ptr<RequestStream> stream, const SamplingParams& params,
           int32_t num_prompt_tokens);
  void Process(std::vector<EngineOutput> outputs);
  // Handles what was queued, then stops the thread. Idempotent.
  void Close();

 private:
  struct State;
  using Item = std::variant<std::shared_ptr<State>, std::vector<EngineOutput>>;
  void Run();
  void Handle(EngineOutput& o);

  const Tokenizer& tokenizer_;
  const std::function<void(const std::string&)> abort_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool closed_ = false;
  std::thread thread_;

  // Processor thread only.
  std::unordered_map<std::string, std::shared_ptr<State>> requests_;
};

}  // namespace tpserve
