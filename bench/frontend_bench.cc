// The HTTP front end's benchmark: the real HttpServer (event-driven transport, render pool,
// response pumps) over a stub engine that emits one token per stream per step, driven by an
// epoll client in the same process. One run measures, side by side:
//   (a) N concurrent streams (default 1000): all complete? the client's TTFT beside the stub
//       engine's own (submit -> first token), so the front end's share is the difference;
//       all connect, then all send at once, or (--arrivals) each sends once connected;
//   (b) events per second the front end delivers, and per second of its I/O thread's CPU
//       time (steps of 0 ms: the engine is never the limit);
//   (c) resident memory per idle keep-alive connection;
//   (d) the latency of plain requests with and without S slow-header clients (one header
//       byte every 100 ms) connected.
// Not a test: numbers go to docs/serving.md.
//
//   build/bench/frontend_bench [--streams 1000 --tokens 50 --step_ms 20 --idle 2000 --slow 200]
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/api/http_server.h"
#include "coordinator/api/process_info.h"
#include "coordinator/text/tokenizer.h"

ABSL_FLAG(int, streams, 1000, "(a) concurrent streaming requests");
ABSL_FLAG(int, tokens, 50, "(a, b) tokens per stream");
ABSL_FLAG(double, step_ms, 20, "(a) stub engine step time: one token per stream per step");
ABSL_FLAG(bool, arrivals, false,
          "(a) each client sends its request as soon as it is connected, one after another as fast as the "
          "client thread goes, instead of all connecting first and then sending at once");
ABSL_FLAG(int, throughput_streams, 256, "(b) concurrent streams of the throughput run (steps of 0 ms)");
ABSL_FLAG(int, throughput_tokens, 400, "(b) tokens per stream of the throughput run");
ABSL_FLAG(int, idle, 2000, "(c) idle keep-alive connections");
ABSL_FLAG(int, slow, 200, "(d) slow-header connections");
ABSL_FLAG(int, probes, 200, "(d) plain requests timed, with and without the slow clients");
ABSL_FLAG(int, io_threads, 1, "HTTP I/O threads (--http-threads)");
ABSL_FLAG(std::string, tokenizer, TPSERVE_DEFAULT_TOKENIZER, "tokenizer.json");

namespace tpserve {
namespace {

// One token per active stream per step, on a thread of its own, as the engine thread pushes.
class StubEngine : public EngineApi {
 public:
  explicit StubEngine(absl::Duration step) : step_(step) {
    info_.served_model_name = "stub";
    info_.max_model_len = 1 << 20;
    info_.engine_version = "bench";
    thread_ = std::thread([this] { Loop(); });
  }
  ~StubEngine() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  void SetStep(absl::Duration step) {
    absl::MutexLock lock(&mu_);
    step_ = step;
  }

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(ServeRequest r) override {
    auto stream = std::make_shared<RequestStream>(r.request_id);
    absl::MutexLock lock(&mu_);
    active_.push_back(Active{stream, r.params.max_tokens, 0, absl::Now()});
    return stream;
  }
  EngineStats Stats() const override { return {}; }
  const ModelInfo& Info() const override { return info_; }
  bool Ready() const override { return true; }

  // Submit -> first token, per request, since the last call.
  std::vector<double> TakeEngineTtftMs() {
    absl::MutexLock lock(&mu_);
    return std::move(engine_ttft_ms_);
  }

 private:
  struct Active {
    std::shared_ptr<RequestStream> stream;
    int32_t max_tokens;
    int32_t generated;
    absl::Time submitted;
  };

  void Loop() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !active_.empty(); };
      mu_.Await(absl::Condition(&work));
      if (step_ > absl::ZeroDuration()) mu_.AwaitWithTimeout(absl::Condition(&stop_), step_);
      std::vector<Active> step;
      step.swap(active_);
      mu_.Unlock();
      const absl::Time now = absl::Now();
      std::vector<double> first;
      std::vector<Active> keep;
      for (Active& a : step) {
        if (a.stream->cancelled()) {
          OutputEvent e;
          e.finish = FinishReason::kCancelled;
          a.stream->Push(std::move(e));
          continue;
        }
        OutputEvent e;
        e.token_ids = {42};
        e.text = " tok";
        e.completion_tokens = ++a.generated;
        e.prompt_tokens = 2;
        if (a.generated == 1) first.push_back(absl::ToDoubleMilliseconds(now - a.submitted));
        if (a.generated >= a.max_tokens) e.finish = FinishReason::kLength;
        const bool more = e.finish == FinishReason::kNone;
        a.stream->Push(std::move(e));
        if (more) keep.push_back(std::move(a));
      }
      mu_.Lock();
      engine_ttft_ms_.insert(engine_ttft_ms_.end(), first.begin(), first.end());
      for (Active& a : keep) active_.push_back(std::move(a));
    }
  }

  ModelInfo info_;
  absl::Mutex mu_;
  absl::Duration step_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Active> active_ ABSL_GUARDED_BY(mu_);
  std::vector<double> engine_ttft_ms_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// CPU seconds of this process's threads named `name` (/proc/self/task/*/comm), from
// schedstat's run time in nanoseconds (stat's utime + stime count 10 ms ticks: too coarse
// for a burst of 1000 requests that costs the I/O thread tens of milliseconds).
double ThreadCpuSeconds(const std::string& name) {
  double total = 0;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  while (dirent* d = readdir(dir)) {
    if (d->d_name[0] == '.') continue;
    const std::string base = absl::StrCat("/proc/self/task/", d->d_name);
    std::string comm;
    std::getline(std::ifstream(base + "/comm"), comm);
    if (comm != name) continue;
    double run_ns = 0;
    if (std::ifstream(base + "/schedstat") >> run_ns) total += run_ns * 1e-9;
  }
  closedir(dir);
  return total;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));  // EINPROGRESS
  return fd;
}

std::string PostRequest(const std::string& body) {
  return absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
                      "Content-Length: ", body.size(), "\r\n\r\n", body);
}

// One client request on its own connection, driven by Client's epoll loop.
struct Call {
  int fd = -1;
  std::string out;
  size_t sent = 0;
  std::string in;
  bool stream = false;
  absl::Time start, sent_at = absl::InfinitePast(), first = absl::InfinitePast(), end = absl::InfinitePast();
  int64_t events = 0;
  size_t scanned = 0;
  bool done = false, failed = false;
};

// Runs `calls` to completion (or `timeout`) on one epoll thread; keeps connections open
// when `keep_open` (their fds are returned in the calls). All connections are opened first,
// then every request is written as soon as its socket is writable: a simultaneous burst.
// With `send_on_connect`, like that many separate clients arriving one after another, each
// call sends its request as soon as its connection is up, and what arrives is read while
// later calls are still connecting (every 16 connects).
void RunCalls(std::vector<Call>& calls, int port, absl::Duration timeout, bool keep_open = false,
              bool send_on_connect = false) {
  const int ep = epoll_create1(0);
  std::unordered_map<int, Call*> by_fd;
  size_t remaining = calls.size();
  std::vector<epoll_event> events(1024);
  char buf[65536];
  auto send_some = [&](Call& c) {
    const ssize_t w = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);  // EAGAIN until connected
    if (w > 0) c.sent += static_cast<size_t>(w);
    if (c.sent == c.out.size()) c.sent_at = absl::Now();
  };
  auto poll = [&](int timeout_ms) {
    const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), timeout_ms);
    for (int i = 0; i < n; ++i) {
      Call& c = *by_fd[events[i].data.fd];
      if (c.done) continue;
      if ((events[i].events & EPOLLOUT) && c.sent < c.out.size()) {
        send_some(c);
        if (c.sent == c.out.size()) {
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.fd = c.fd;
          epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
        }
      }
      if (!(events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
      while (true) {
        const ssize_t r = recv(c.fd, buf, sizeof(buf), 0);
        if (r <= 0) {
          if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            c.done = c.failed = true;
            --remaining;
          }
          break;
        }
        const absl::Time now = absl::Now();
        c.in.append(buf, static_cast<size_t>(r));
        if (c.stream) {
          for (size_t at; (at = c.in.find("data: ", c.scanned)) != std::string::npos;) {
            if (c.first == absl::InfinitePast()) c.first = now;
            ++c.events;
            c.scanned = at + 6;
          }
          if (c.in.find("data: [DONE]", c.scanned > 6 ? c.scanned - 6 : 0) != std::string::npos) c.done = true;
          if (c.in.size() > 4096) {  // keep the tail only
            const size_t cut = c.in.size() - 64;
            c.in.erase(0, cut);
            c.scanned = c.scanned > cut ? c.scanned - cut : 0;
          }
        } else {
          const size_t head = c.in.find("\r\n\r\n");
          const size_t cl = c.in.find("Content-Length: ");
          if (head != std::string::npos && cl != std::string::npos &&
              c.in.size() >= head + 4 + std::stoul(c.in.substr(cl + 16))) {
            c.done = true;
          }
        }
        if (c.done) {
          c.end = now;
          --remaining;
          break;
        }
      }
    }
  };
  for (size_t k = 0; k < calls.size(); ++k) {
    Call& c = calls[k];
    c.start = absl::Now();
    c.fd = Connect(port);
    if (send_on_connect) send_some(c);
    epoll_event ev{};
    ev.events = EPOLLIN | (c.sent < c.out.size() ? static_cast<uint32_t>(EPOLLOUT) : 0u);
    ev.data.fd = c.fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
    by_fd[c.fd] = &c;
    if (send_on_connect && k % 16 == 15) poll(0);
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (remaining > 0 && absl::Now() < deadline) poll(100);
  close(ep);
  for (Call& c : calls) {
    if (!c.done) c.failed = true;
    if (!keep_open || c.failed) {
      close(c.fd);
      c.fd = -1;
    }
  }
}

long RssKiB() { return static_cast<long>(ReadProcessMemory().rss_bytes >> 10); }

int Run() {
  rlimit fds{};
  getrlimit(RLIMIT_NOFILE, &fds);
  fds.rlim_cur = fds.rlim_max;
  setrlimit(RLIMIT_NOFILE, &fds);
  auto tokenizer = Tokenizer::FromFile(absl::GetFlag(FLAGS_tokenizer));
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "frontend_bench: %s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  StubEngine engine(absl::Milliseconds(absl::GetFlag(FLAGS_step_ms)));
  HttpServerOptions o;
  o.transport.host = "127.0.0.1";
  o.transport.port = 0;
  o.transport.io_threads = absl::GetFlag(FLAGS_io_threads);
  o.transport.max_connections = 100000;
  o.transport.keep_alive_timeout = absl::Minutes(10);
  o.render_threads = 1;
  o.max_pending_renders = 100000;
  HttpServer server(engine, **tokenizer, nullptr, o);
  if (absl::Status st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "frontend_bench: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  const int port = server.port();
  std::printf("frontend_bench: HttpServer (%d I/O thread(s), 1 render thread) over a stub engine, epoll client, %s, "
              "%u cores\n",
              o.transport.io_threads, CpuDeviceName().c_str(), std::thread::hardware_concurrency());

  // (a) N concurrent streams.
  auto streams = [&](int n, int tokens) {
    std::vector<Call> calls(static_cast<size_t>(n));
    const std::string req = PostRequest(
        absl::StrCat(R"({"prompt": "Hello", "max_tokens": )", tokens, R"(, "ignore_eos": true, "stream": true})"));
    for (Call& c : calls) {
      c.out = req;
      c.stream = true;
    }
    return calls;
  };
  {
    const int n = absl::GetFlag(FLAGS_streams), tokens = absl::GetFlag(FLAGS_tokens);
    std::vector<Call> calls = streams(n, tokens);
    engine.TakeEngineTtftMs();
    const double io0 = ThreadCpuSeconds("tpserve-http"), render0 = ThreadCpuSeconds("tpserve-render");
    RunCalls(calls, port, absl::Minutes(5), /*keep_open=*/false, absl::GetFlag(FLAGS_arrivals));
    const double io = ThreadCpuSeconds("tpserve-http") - io0, render = ThreadCpuSeconds("tpserve-render") - render0;
    std::vector<double> client_ttft, e2e, to_send, sent_to_first;
    int ok = 0;
    for (const Call& c : calls) {
      if (c.failed || c.events < tokens) continue;
      ++ok;
      client_ttft.push_back(absl::ToDoubleMilliseconds(c.first - c.start));
      to_send.push_back(absl::ToDoubleMilliseconds(c.sent_at - c.start));
      sent_to_first.push_back(absl::ToDoubleMilliseconds(c.first - c.sent_at));
      e2e.push_back(absl::ToDoubleMilliseconds(c.end - c.start));
    }
    std::vector<double> engine_ttft = engine.TakeEngineTtftMs();
    std::printf("(a) %d concurrent streams x %d tokens, steps of %g ms, %s: %d/%d complete\n", n, tokens,
                absl::GetFlag(FLAGS_step_ms),
                absl::GetFlag(FLAGS_arrivals) ? "each sent once connected (--arrivals)"
                                              : "all connected, then sent at once",
                ok, n);
    std::printf("    TTFT ms        p50 %8.1f  p99 %8.1f  max %8.1f  (client: connect to first event)\n",
                Percentile(client_ttft, 50), Percentile(client_ttft, 99), Percentile(client_ttft, 100));
    std::printf("      of which   p50 %8.1f  p99 %8.1f  connect to request sent; p50 %.1f p99 %.1f sent to first event\n",
                Percentile(to_send, 50), Percentile(to_send, 99), Percentile(sent_to_first, 50),
                Percentile(sent_to_first, 99));
    std::printf("    engine TTFT ms p50 %8.1f  p99 %8.1f  max %8.1f  (stub: submit to first token; a step is %g ms)\n",
                Percentile(engine_ttft, 50), Percentile(engine_ttft, 99), Percentile(engine_ttft, 100),
                absl::GetFlag(FLAGS_step_ms));
    std::printf("    front end's share of TTFT: p50 %.1f ms, p99 %.1f ms (client p - engine p)\n",
                Percentile(client_ttft, 50) - Percentile(engine_ttft, 50),
                Percentile(client_ttft, 99) - Percentile(engine_ttft, 99));
    std::printf("    CPU: I/O thread %.3f s (%.1f us a stream), render thread %.3f s (%.1f us a request)\n", io,
                io * 1e6 / std::max(1, n), render, render * 1e6 / std::max(1, n));
  }

  // (b) Events per second with an engine that never waits.
  {
    engine.SetStep(absl::ZeroDuration());
    const int n = absl::GetFlag(FLAGS_throughput_streams), tokens = absl::GetFlag(FLAGS_throughput_tokens);
    std::vector<Call> calls = streams(n, tokens);
    const double cpu0 = ThreadCpuSeconds("tpserve-http");
    const absl::Time t0 = absl::Now();
    RunCalls(calls, port, absl::Minutes(5));
    const double wall = absl::ToDoubleSeconds(absl::Now() - t0);
    const double cpu = ThreadCpuSeconds("tpserve-http") - cpu0;
    int64_t events = 0;
    int ok = 0;
    for (const Call& c : calls) {
      events += c.events;
      ok += c.failed ? 0 : 1;
    }
    std::printf("(b) %d streams x %d tokens, steps of 0 ms: %d/%d complete, %lld SSE events in %.2f s\n", n, tokens,
                ok, n, static_cast<long long>(events), wall);
    std::printf("    %.0f events/s delivered; I/O thread busy %.2f s: %.0f events per I/O-thread CPU second\n",
                static_cast<double>(events) / wall, cpu, cpu > 0 ? static_cast<double>(events) / cpu : 0.0);
    engine.SetStep(absl::Milliseconds(absl::GetFlag(FLAGS_step_ms)));
  }

  // (c) Memory per idle keep-alive connection (after one request each).
  {
    const int n = absl::GetFlag(FLAGS_idle);
    const long rss0 = RssKiB();
    std::vector<Call> calls(static_cast<size_t>(n));
    for (Call& c : calls) c.out = PostRequest(R"({"prompt": "Hello", "max_tokens": 1})");
    RunCalls(calls, port, absl::Minutes(2), /*keep_open=*/true);
    absl::SleepFor(absl::Milliseconds(200));
    const long rss1 = RssKiB();
    int open = 0;
    for (const Call& c : calls) open += c.fd >= 0 ? 1 : 0;
    std::printf("(c) %d idle keep-alive connections (one request each): rss +%ld KiB, %.1f KiB per connection\n",
                open, rss1 - rss0, open > 0 ? static_cast<double>(rss1 - rss0) / open : 0.0);
    for (Call& c : calls) {
      if (c.fd >= 0) close(c.fd);
    }
  }

  // (d) Plain requests with and without slow-header clients.
  {
    auto probe = [&] {
      std::vector<double> ms;
      for (int i = 0; i < absl::GetFlag(FLAGS_probes); ++i) {
        std::vector<Call> one(1);
        one[0].out = PostRequest(R"({"prompt": "Hello", "max_tokens": 1})");
        RunCalls(one, port, absl::Seconds(30));
        if (!one[0].failed) ms.push_back(absl::ToDoubleMilliseconds(one[0].end - one[0].start));
      }
      return ms;
    };
    engine.SetStep(absl::ZeroDuration());
    const std::vector<double> alone = probe();
    const int s = absl::GetFlag(FLAGS_slow);
    std::vector<int> slow;
    const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    for (int i = 0; i < s; ++i) slow.push_back(Connect(port));
    std::atomic<bool> stop{false};
    std::thread trickle([&] {
      size_t k = 0;
      while (!stop.load()) {
        for (int fd : slow) send(fd, &head[k % head.size()], 1, MSG_NOSIGNAL);
        ++k;
        absl::SleepFor(absl::Milliseconds(100));
      }
    });
    absl::SleepFor(absl::Milliseconds(300));
    const std::vector<double> with_slow = probe();
    stop.store(true);
    trickle.join();
    for (int fd : slow) close(fd);
    std::printf("(d) %zu plain requests (max_tokens 1), latency ms: alone p50 %.2f p99 %.2f; with %d slow-header "
                "clients p50 %.2f p99 %.2f (delta p99 %+.2f ms)\n",
                alone.size(), Percentile(alone, 50), Percentile(alone, 99), s, Percentile(with_slow, 50),
                Percentile(with_slow, 99), Percentile(with_slow, 99) - Percentile(alone, 99));
  }
  server.Shutdown();
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tpserve::Run();
}
