// tpbench's load generator (see runner.h).
#include "bench/tpbench/runner.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpserve::bench {
namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string Rfc3339(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone()); }

absl::Status LoadOptions::Validate() const {
  if (concurrencies.empty() && request_rates.empty()) {
    return absl::InvalidArgumentError("give at least one --concurrency level or --request-rate");
  }
  for (int c : concurrencies) {
    if (c < 1 || c > 4096) return absl::InvalidArgumentError(absl::StrCat("--concurrency ", c, " is not in [1, 4096]"));
  }
  for (double r : request_rates) {
    if (!(r > 0)) return absl::InvalidArgumentError(absl::StrCat("--request-rate ", r, " must be > 0"));
  }
  if (rounds < 1) return absl::InvalidArgumentError("--rounds must be at least 1");
  if (round_size < 1) return absl::InvalidArgumentError("--round-size must be at least 1");
  if (warmup_requests < 0) return absl::InvalidArgumentError("--warmup must be >= 0");
  if (timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("--timeout must be > 0");
  return absl::OkStatus();
}

Runner::Runner(Target& target, std::vector<BenchRequest> workload, LoadOptions options, RecordSink sink)
    : target_(target), workload_(std::move(workload)), options_(std::move(options)), sink_(std::move(sink)) {}

double Runner::Now() const { return static_cast<double>(SteadyNs() - start_ns_) / 1e9; }

BenchRequest Runner::NextRequest() {
  std::lock_guard<std::mutex> lock(mu_);
  return workload_[next_request_++ % workload_.size()];
}

RequestRecord Runner::SendOne(const BenchRequest& request, int concurrency, double rate, int round) {
  RequestRecord r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    r.seq = next_seq_++;
  }
  r.timestamp = Rfc3339(absl::Now());
  r.send_time_s = Now();
  r.target = target_.Name();
  r.concurrency = concurrency;
  r.request_rate = rate;
  r.round = round;
  r.expected_prompt_tokens = request.token_ids.empty() || !target_.AcceptsTokenIds()
                                 ? request.expected_prompt_tokens
                                 : static_cast<int>(request.token_ids.size());
  r.max_tokens = request.max_tokens;
  r.prompt_index = static_cast<int>(request.seq);
  r.outcome = target_.Send(request, options_.timeout);
  return r;
}

void Runner::Deliver(const RequestRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  sink_(r);
  ++level_done_;
  if (!r.outcome.success) ++level_failed_;
  if (options_.progress && isatty(STDERR_FILENO)) {
    constexpr int kWidth = 30;
    const int filled = level_total_ > 0 ? kWidth * level_done_ / level_total_ : kWidth;
    std::fprintf(stderr, "\r%-22s [%s%s] %d/%d, %d failed ", level_name_.c_str(), std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), level_done_, level_total_, level_failed_);
    std::fflush(stderr);
  }
}

void Runner::ReadCounters(ServerCounters* c, bool* ok) {
  absl::StatusOr<ServerCounters> s = target_.Counters();
  *ok = s.ok();
  if (s.ok()) *c = *s;
}

void Runner::RunClosedLoop(int concurrency, LevelRecord* level) {
  std::vector<std::thread> clients;
  for (int w = 0; w < concurrency; ++w) {
    clients.emplace_back([this, concurrency] {
      for (int round = 0; round < options_.rounds; ++round) {
        Deliver(SendOne(NextRequest(), concurrency, 0, round));
      }
    });
  }
  for (std::thread& t : clients) t.join();
  level->concurrency = concurrency;
}

void Runner::RunOpenLoop(double rate, LevelRecord* level) {
  std::mt19937_64 rng(options_.seed + static_cast<uint64_t>(rate * 1000));
  std::exponential_distribution<double> gap_s(rate);
  const int total = options_.rounds * options_.round_size;
  std::vector<std::thread> requests;
  const int64_t level_start = SteadyNs();
  double arrival_s = 0;
  for (int i = 0; i < total; ++i) {
    if (i > 0) arrival_s += gap_s(rng);
    const int64_t due = level_start + static_cast<int64_t>(arrival_s * 1e9);
    const int64_t wait = due - SteadyNs();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
    const int round = i / options_.round_size;
    requests.emplace_back([this, rate, round, request = NextRequest()] { Deliver(SendOne(request, 0, rate, round)); });
  }
  for (std::thread& t : requests) t.join();
  level->request_rate = rate;
}

bool Runner::TakeRequest(BenchRequest* request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (next_request_ >= workload_.size()) return false;
  *request = workload_[next_request_++];
  return true;
}

void Runner::StartLevel(std::string name, int total) {
  std::lock_guard<std::mutex> lock(mu_);
  level_name_ = std::move(name);
  level_total_ = total;
  level_done_ = level_failed_ = 0;
}

// Warm-up: the first request pays for cold caches and lazy initialization; it is reported
// apart from the levels.
void Runner::Warmup(RunRecord* run) {
  StartLevel("warm-up", options_.warmup_requests);
  for (int i = 0; i < options_.warmup_requests; ++i) {
    RequestRecord r = SendOne(NextRequest(), 1, 0, -1);
    if (i == 0) run->warmup_ms = r.outcome.latency_ms;
    Deliver(r);
  }
}

void Runner::EndLevel(LevelRecord level, const ServerCounters& before, bool have_before, RunRecord* run) {
  level.end_s = Now();
  ServerCounters after;
  bool have_after = false;
  ReadCounters(&after, &have_after);
  if (have_before && have_after) {
    level.server.available = true;
    level.server.steps = after.steps - before.steps;
    level.server.compute_ms = after.compute_ms - before.compute_ms;
    level.server.allreduce_ms = after.allreduce_ms - before.allreduce_ms;
    level.server.scheduling_ms = after.scheduling_ms - before.scheduling_ms;
    level.server.pipeline_ms = after.pipeline_ms - before.pipeline_ms;
    level.server.stages_busy_ms = after.stages_busy_ms - before.stages_busy_ms;
    level.server.preemptions = after.preemptions - before.preemptions;
    level.server.prefix_cache_hit_rate = after.prefix_cache_hit_rate;
    level.server.peak_rss_bytes = after.peak_rss_bytes;
    level.server.spec_drafts = after.spec_drafts - before.spec_drafts;
    level.server.spec_draft_tokens = after.spec_draft_tokens - before.spec_draft_tokens;
    level.server.spec_accepted_tokens = after.spec_accepted_tokens - before.spec_accepted_tokens;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.progress) {
    std::fprintf(stderr, "%s%-22s %d requests, %d failed, %.1f s\n", isatty(STDERR_FILENO) ? "\r" : "",
                 level_name_.c_str(), level_done_, level_failed_, level.end_s - level.start_s);
  }
  run->levels.push_back(level);
}

absl::Status Runner::Run(RunRecord* run) {
  if (workload_.empty()) return absl::InvalidArgumentError("the workload has no prompts");
  if (absl::Status s = options_.Validate(); !s.ok()) return s;
  start_wall_ = absl::Now();
  start_ns_ = SteadyNs();
  run->start_time = Rfc3339(start_wall_);
  Warmup(run);

  auto run_level = [&](int concurrency, double rate) {
    LevelRecord level;
    level.rounds = options_.rounds;
    StartLevel(concurrency > 0 ? absl::StrCat("concurrency ", concurrency) : absl::StrCat("rate ", rate, "/s"),
               concurrency > 0 ? concurrency * options_.rounds : options_.rounds * options_.round_size);
    ServerCounters before;
    bool have_before = false;
    ReadCounters(&before, &have_before);
    level.start_s = Now();
    if (concurrency > 0) {
      RunClosedLoop(concurrency, &level);
    } else {
      RunOpenLoop(rate, &level);
    }
    EndLevel(level, before, have_before, run);
  };
  for (int c : options_.concurrencies) run_level(c, 0);
  for (double rate : options_.request_rates) run_level(0, rate);
  run->end_time = Rfc3339(absl::Now());
  return absl::OkStatus();
}

absl::Status Runner::RunEachOnce(int concurrency, RunRecord* run) {
  if (workload_.empty()) return absl::InvalidArgumentError("the workload has no prompts");
  if (concurrency < 1 || concurrency > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--concurrency ", concurrency, " is not in [1, 4096]"));
  }
  if (absl::Status s = options_.Validate(); !s.ok()) return s;
  start_wall_ = absl::Now();
  start_ns_ = SteadyNs();
  run->start_time = Rfc3339(start_wall_);
  Warmup(run);
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_request_ = 0;  // the level sends every prompt, the warm-up's too
  }
  LevelRecord level;
  level.rounds = 1;
  level.concurrency = concurrency;
  StartLevel(absl::StrCat("concurrency ", concurrency), static_cast<int>(workload_.size()));
  ServerCounters before;
  bool have_before = false;
  ReadCounters(&before, &have_before);
  level.start_s = Now();
  std::vector<std::thread> clients;
  for (int w = 0; w < concurrency; ++w) {
    clients.emplace_back([this, concurrency] {
      BenchRequest request;
      while (TakeRequest(&request)) Deliver(SendOne(request, concurrency, 0, 0));
    });
  }
  for (std::thread& t : clients) t.join();
  EndLevel(level, before, have_before, run);
  run->end_time = Rfc3339(absl::Now());
  return absl::OkStatus();
}

}  // namespace tpserve::bench
