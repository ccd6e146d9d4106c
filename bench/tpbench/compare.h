// `tpbench compare`'s pure part: prices (a --prices flag, a router config's price_per_mtok),
// the cost of a side's requests, greedy-output agreement between two sides' answers to the same
// prompts, and the summary (JSON, Markdown, SVG plots). The load itself is Runner::RunEachOnce.
// Tested by tests/tpbench_compare_test.cc and end to end by tests/router_test.sh.
#ifndef TPSERVE_BENCH_TPBENCH_COMPARE_H_
#define TPSERVE_BENCH_TPBENCH_COMPARE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/tpbench/metrics.h"
#include "bench/tpbench/record.h"
#include "nlohmann/json.hpp"

namespace tpserve::bench {

// USD per million tokens.
struct Price {
  double input_per_mtok = 0;
  double output_per_mtok = 0;
};

// "--prices MODEL=IN:OUT[,MODEL=IN:OUT...]", e.g. "gemma=0.1:0.4,llama-70b=0.59:0.79".
// INVALID_ARGUMENT naming the bad entry (no '=', no ':', not a number, negative, a model twice).
absl::StatusOr<std::map<std::string, Price>> ParsePrices(absl::string_view flag_value);

// The prices in a router config (`tpserve router --config`): every backend with both parts of
// its price_per_mtok, under each model that lists it.
class PriceBook {
 public:
  // Parses the config as the router does (the same errors); a backend with only one part of
  // price_per_mtok is not priced.
  static absl::StatusOr<PriceBook> FromRouterConfig(absl::string_view json_text);
  void Add(const std::string& model, const std::string& backend_url, Price price);
  // The price of `backend_url` answering for `model`: its entry under that model, else (a
  // fallback model's backend answered) the one price every model gives that URL; nullopt when
  // there is none or the models disagree.
  std::optional<Price> Lookup(const std::string& model, const std::string& backend_url) const;
  bool empty() const { return prices_.empty(); }

 private:
  std::map<std::pair<std::string, std::string>, Price> prices_;  // (model, url) -> price
};

// The cost of a side's successful requests (warm-up excluded): sum over requests of
// (prompt_tokens * input + completion_tokens * output) / 1e6, with the server's prompt count
// (else the workload's); a request without a price or a prompt count is unpriced.
struct Cost {
  int64_t priced_requests = 0;
  int64_t unpriced_requests = 0;
  int64_t input_tokens = 0, output_tokens = 0;  // of the priced requests
  double usd = 0;
  // Every successful request was priced (and there was at least one).
  bool complete() const { return priced_requests > 0 && unpriced_requests == 0; }
  // USD per million tokens (input and output) and per million output tokens; -1 when not complete.
  double usd_per_mtok() const;
  double usd_per_output_mtok() const;
};
using PriceOf = std::function<std::optional<Price>(const RequestRecord&)>;
Cost CostOf(const std::vector<RequestRecord>& records, const PriceOf& price_of);

// The index of the first element where `a` and `b` differ (the shorter one's length when it is
// a prefix of the other); -1 when they are equal.
int64_t FirstDifferentToken(const std::vector<int32_t>& a, const std::vector<int32_t>& b);
// The same in Unicode characters (UTF-8 code points) of two texts.
int64_t FirstDifferentCharacter(absl::string_view a, absl::string_view b);

// Greedy-output agreement between two sides' answers to the same prompts (matched by
// prompt_index, warm-up excluded). Compared in tokens when every pair carries token ids (tpserve's
// gRPC API), else in characters (OpenAI APIs give text, no token ids).
struct Agreement {
  std::string unit;            // "token" or "character"; "" when no pair could be compared
  int64_t prompts = 0;         // prompts either side sent
  int64_t compared = 0;        // both sides succeeded with their output kept
  int64_t identical = 0;
  int64_t not_compared = 0;    // a side failed, or did not send the prompt
  std::vector<std::pair<int, int64_t>> first_difference;  // (prompt_index, index) of each differing pair
  // First-difference indices in power-of-two bins: "0", "1", "2-3", "4-7", ...; up to the
  // highest bin used.
  std::vector<std::pair<std::string, int64_t>> histogram;
  double identical_fraction() const { return compared > 0 ? static_cast<double>(identical) / compared : -1; }
};
Agreement CompareOutputs(const std::vector<RequestRecord>& a, const std::vector<RequestRecord>& b);

// One side of a comparison, measured.
struct CompareSide {
  std::string name;        // "A", "B"
  std::string target;      // base URL or grpc://
  std::string model;       // as sent
  std::string price_source;  // where its prices came from: "--prices", "router config", "none"
  RunRecord run;           // one level (Runner::RunEachOnce)
  std::vector<RequestRecord> records;
  PriceOf price_of;        // nullptr: no prices
};

struct CompareInput {
  std::string api;       // e.g. "openai-chat"
  std::string workload;  // DescribeWorkload
  int concurrency = 0;
  int num_prompts = 0;
  CompareSide a, b;
};

// Writes <out_dir>/compare.json, compare.md and the plots (ttft_cdf.svg, tpot_cdf.svg,
// agreement.svg when outputs differ), creating out_dir; returns the Markdown.
absl::StatusOr<std::string> WriteCompare(const CompareInput& input, const std::string& out_dir);
// The JSON summary alone (what compare.json holds).
nlohmann::json CompareJson(const CompareInput& input);

}  // namespace tpserve::bench

#endif  // TPSERVE_BENCH_TPBENCH_COMPARE_H_
