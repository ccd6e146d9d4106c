// Test harness: runs a function on every rank of a tensor-parallel group, as threads
// (LocalGroup) or as the MPI world, and loads transformers reference fixtures.
#pragma once

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "worker/communicator.h"
#include "worker/model.h"
#include "worker/step_executor.h"
#include "worker/worker_loop.h"

namespace tpserve::testing {

struct Reference {
  std::vector<int32_t> prompt_ids;
  std::vector<std::vector<float>> prompt_logits;
  std::vector<int32_t> greedy_ids;
  std::vector<std::vector<float>> greedy_logits;
  std::string dtype_on_disk;
};

inline std::string FixtureDir(const std::string& name) { return std::string(TPSERVE_FIXTURES) + "/models/" + name; }
// tests/fixtures/gguf/models/FILE (FILE: e.g. "llama3_quant.gguf").
inline std::string GgufFixturePath(const std::string& file) {
  return std::string(TPSERVE_FIXTURES) + "/gguf/models/" + file;
}

// A reference.json written by tools/make_model_fixtures.py.
inline Reference LoadReferenceFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str());
  Reference r;
  r.prompt_ids = j["prompt_ids"].get<std::vector<int32_t>>();
  r.greedy_ids = j["greedy_ids"].get<std::vector<int32_t>>();
  auto rows = [](const nlohmann::json& a) {
    std::vector<std::vector<float>> out;
    for (const auto& row : a) {
      std::vector<float> v;
      for (const auto& x : row) v.push_back(static_cast<float>(x.get<double>()));
      out.push_back(std::move(v));
    }
    return out;
  };
  r.prompt_logits = rows(j["prompt_logits"]);
  r.greedy_logits = rows(j["greedy_logits"]);
  r.dtype_on_disk = j["dtype_on_disk"].get<std::string>();
  return r;
}

inline Reference LoadReference(const std::string& name) { return LoadReferenceFile(FixtureDir(name) + "/reference.json"); }

// Runs body(comm) on `tp` threads, one per rank; rethrows nothing (gtest asserts inside
// body are thread-safe on POSIX).
inline void RunThreads(int tp, const std::function<void(Communicator&)>& body) {
  LocalGroup group(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.Rank(r);
      body(*comm);
    });
  }
  for (auto& t : threads) t.join();
}

// Largest |a - b| / (atol + rtol * |b|); <= 1 passes.
inline double ToleranceRatio(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / (atol + rtol * std::abs(b[i])));
  }
  return a.size() == b.size() ? worst : 1e30;
}

}  // namespace tpserve::testing
