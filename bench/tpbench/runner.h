// tpbench's load generator: a warm-up, then closed-loop concurrency levels (c clients,
// each sending `rounds` requests back to back) and open-loop Poisson levels (a given
// request rate, `rounds` x `round_size` arrivals). Every finished request is written at
// once (partial results survive a crash); the server's step-time counters are read around
// each level. Tested end to end by tests/tpbench_test.sh and with a fake target by
// tests/tpbench_runner_test.cc.
#ifndef TPSERVE_BENCH_TPBENCH_RUNNER_H_
#define TPSERVE_BENCH_TPBENCH_RUNNER_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "bench/tpbench/record.h"
#include "bench/tpbench/target.h"

namespace tpserve::bench {

struct LoadOptions {
  std::vector<int> concurrencies = {1, 2, 4, 8, 16};  // closed-loop levels, run first
  std::vector<double> request_rates;                  // open-loop levels (requests/s)
  int rounds = 10;                                    // per level
  int round_size = 10;                                // open loop: arrivals per round
  int warmup_requests = 1;                            // sent one by one before the levels
  absl::Duration timeout = absl::Seconds(120);        // per request
  uint64_t seed = 0;                                  // Poisson arrival times
  bool progress = true;                               // a progress bar on stderr

  absl::Status Validate() const;
};

// Receives every finished request in completion order; called under a lock.
using RecordSink = std::function<void(const RequestRecord&)>;

class Runner {
 public:
  // `workload` must not be empty; requests are taken from it in order, cycling.
  Runner(Target& target, std::vector<BenchRequest> workload, LoadOptions options, RecordSink sink);

  // Runs the warm-up and every level; fills run->warmup_ms and run->levels. Request
  // failures are records, not errors: Run fails only if it could not run at all.
  absl::Status Run(RunRecord* run);

  // tpbench compare: the warm-up, then one closed-loop level of `concurrency` clients that send
  // every prompt of the workload exactly once (each client takes the next prompt left), with
  // options.rounds ignored. Fills run->warmup_ms and one level; the records' prompt_index says
  // which prompt each sent.
  absl::Status RunEachOnce(int concurrency, RunRecord* run);

 private:
  RequestRecord SendOne(const BenchRequest& request, int concurrency, double rate, int round);
  void RunClosedLoop(int concurrency, LevelRecord* level);
  void RunOpenLoop(double rate, LevelRecord* level);
  void Deliver(const RequestRecord& r);
  BenchRequest NextRequest();
  bool TakeRequest(BenchRequest* request);  // the next prompt not yet sent; false when none is left
  void Warmup(RunRecord* run);
  void StartLevel(std::string name, int total);
  void EndLevel(LevelRecord level, const ServerCounters& before, bool have_before, RunRecord* run);
  double Now() const;  // seconds since the run started
  void ReadCounters(ServerCounters* c, bool* ok);

  Target& target_;
  const std::vector<BenchRequest> workload_;
  const LoadOptions options_;
  RecordSink sink_;
  std::mutex mu_;  // guards next_*, the sink and the progress counters
  size_t next_request_ = 0;
  int64_t next_seq_ = 0;
  int level_total_ = 0, level_done_ = 0, level_failed_ = 0;
  std::string level_name_;
  absl::Time start_wall_;
  int64_t start_ns_ = 0;
};

// RFC 3339 UTC with milliseconds, e.g. "2026-11-29T22:05:26.123Z".
std::string Rfc3339(absl::Time t);

}  // namespace tpserve::bench

#endif  // TPSERVE_BENCH_TPBENCH_RUNNER_H_
