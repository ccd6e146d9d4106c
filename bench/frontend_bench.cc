// The HTTP front end's benchmark: the real HttpServer (event-driven transport, render pool,
// response pumps) over a stub engine that emits one token per stream per step, driven by an
// epoll client in the same process. One run measures, side by side:
//   (a) N concurrent streams (default 1000) on fresh connections: all complete? each request's
//       TTFT at the client beside the stub engine's own (submit -> first token) for that same
//       request (matched by id), so the front end's share is their difference. Two starts,
//       side by side: "fresh" (each request connects and sends at once, timed from its own
//       connect(); its first event's time is when it reached the client's socket, the kernel's
//       receive stamp), and "before 2026-12-02" (all 1000 connect first, then send; timed from
//       each connect(), so a request's clock also ran while the client opened the later
//       connections; first event as the client's loop read it);
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
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/api/http_server.h"
#include "coordinator/api/process_info.h"
#include "coordinator/text/tokenizer.h"

ABSL_FLAG(int, streams, 1000, "(a) concurrent streaming requests");
ABSL_FLAG(int, tokens, 50, "(a, b) tokens per stream");
ABSL_FLAG(double, step_ms, 20, "(a) stub engine step time: one token per stream per step");
ABSL_FLAG(std::string, burst, "fresh,connect_first",
          "(a) the bursts to run, in order: fresh (each request connects and sends at once, timed from its "
          "connect()), connect_first (all connect, then all send; timed from each connect(): the figure "
          "before 2026-12-02)");
ABSL_FLAG(int, throughput_streams, 256, "(b) concurrent streams of the throughput run (steps of 0 ms)");
ABSL_FLAG(int, throughput_tokens, 400, "(b) tokens per stream of the throughput run");
ABSL_FLAG(int, idle, 2000, "(c) idle keep-alive connections");
ABSL_FLAG(int, slow, 200, "(d) slow-header connections");
ABSL_FLAG(int, probes, 200, "(d) plain requests timed, with and without the slow clients");
ABSL_FLAG(int, io_threads, 2, "HTTP I/O threads (--http-threads; 2, its default)");
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

  // When each request was submitted and got its first token, by request id, since the last call.
  struct Times {
    absl::Time submitted, first_token;
  };
  std::unordered_map<std::string, Times> TakeEngineTimes() {
    absl::MutexLock lock(&mu_);
    return std::move(engine_times_);
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
      std::vector<std::pair<std::string, Times>> first;
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
        if (a.generated == 1) first.emplace_back(a.stream->request_id(), Times{a.submitted, now});
        if (a.generated >= a.max_tokens) e.finish = FinishReason::kLength;
        const bool more = e.finish == FinishReason::kNone;
        a.stream->Push(std::move(e));
        if (more) keep.push_back(std::move(a));
      }
      mu_.Lock();
      engine_times_.insert(first.begin(), first.end());
      for (Active& a : keep) active_.push_back(std::move(a));
    }
  }

  ModelInfo info_;
  absl::Mutex mu_;
  absl::Duration step_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Active> active_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Times> engine_times_ ABSL_GUARDED_BY(mu_);
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

// A non-blocking connect to the server; `nodelay` sets TCP_NODELAY (the connect_first burst
// kept it; a client that sends its request in one write does not need it), `stamp_rx` asks the
// kernel for each read's receive time (SO_TIMESTAMPNS).
int Connect(int port, bool nodelay = true, bool stamp_rx = false, absl::Time* connect_at = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int one = 1;
  if (nodelay) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (stamp_rx) setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect_at != nullptr) *connect_at = absl::Now();
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
  // start: the connect() call. sent_at: the request's last byte written. first: its first SSE
  // event read by the client's loop; first_rx: the kernel's receive stamp of that read (the
  // last segment it took: when the first event came with a later one, the later one's).
  absl::Time start, sent_at = absl::InfinitePast(), first = absl::InfinitePast(), first_rx = absl::InfinitePast(),
                    end = absl::InfinitePast();
  bool first_with_later = false;  // the read that took the first event took a second one too ([DONE] aside)
  std::string id;                 // the response's id, from its first event
  int64_t events = 0;
  size_t scanned = 0;
  bool done = false, failed = false;
};

enum class Burst {
  // Every request connects and at once sends (each its own client, arriving as fast as one
  // thread opens them); what has arrived is read every 16 connects.
  kFresh,
  // All connect first; each request is sent once its socket is writable and the connect loop
  // is over.
  kConnectFirst,
  // Sequential-ish calls of (b)-(d): all connect, then send (as kConnectFirst).
  kPlain,
};

// Runs `calls` to completion (or `timeout`) on one epoll thread; keeps connections open
// when `keep_open` (their fds are returned in the calls).
void RunCalls(std::vector<Call>& calls, int port, absl::Duration timeout, bool keep_open = false,
              Burst burst = Burst::kPlain) {
  const int ep = epoll_create1(0);
  std::unordered_map<int, Call*> by_fd;
  size_t remaining = calls.size();
  std::vector<epoll_event> events(1024);
  char buf[65536];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec)) + 64];
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
        iovec iov{buf, sizeof(buf)};
        msghdr m{};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = control;
        m.msg_controllen = sizeof(control);
        const ssize_t r = recvmsg(c.fd, &m, 0);
        if (r <= 0) {
          if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
            c.done = c.failed = true;
            --remaining;
          }
          break;
        }
        const absl::Time now = absl::Now();
        absl::Time rx = now;
        for (cmsghdr* h = CMSG_FIRSTHDR(&m); h != nullptr; h = CMSG_NXTHDR(&m, h)) {
          if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_TIMESTAMPNS) {
            timespec ts;
            std::memcpy(&ts, CMSG_DATA(h), sizeof(ts));
            rx = absl::TimeFromTimespec(ts);
          }
        }
        c.in.append(buf, static_cast<size_t>(r));
        if (c.stream) {
          const bool had_first = c.first != absl::InfinitePast();
          int new_events = 0;
          for (size_t at; (at = c.in.find("data: ", c.scanned)) != std::string::npos;) {
            if (c.first == absl::InfinitePast()) {
              c.first = now;
              c.first_rx = rx;
              const size_t id = c.in.find("\"id\":\"", at);
              const size_t id_end = id == std::string::npos ? id : c.in.find('"', id + 6);
              if (id_end != std::string::npos) c.id = c.in.substr(id + 6, id_end - id - 6);
            }
            ++c.events;
            if (c.in.compare(at + 6, 6, "[DONE]") != 0) ++new_events;
            c.scanned = at + 6;
          }
          if (!had_first && new_events > 1) c.first_with_later = true;
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
  const bool fresh = burst == Burst::kFresh;
  for (size_t k = 0; k < calls.size(); ++k) {
    Call& c = calls[k];
    c.fd = Connect(port, /*nodelay=*/!fresh, /*stamp_rx=*/fresh, &c.start);
    if (fresh) send_some(c);  // loopback: the handshake is over when connect() returns
    epoll_event ev{};
    ev.events = EPOLLIN | (c.sent < c.out.size() ? static_cast<uint32_t>(EPOLLOUT) : 0u);
    ev.data.fd = c.fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
    by_fd[c.fd] = &c;
    if (fresh && k % 16 == 15) poll(0);
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
  o.frontend.render_threads = 1;
  o.frontend.max_pending_renders = 100000;
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
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_burst), ',', absl::SkipEmpty())) {
    if (name != "fresh" && name != "connect_first") {
      std::fprintf(stderr, "frontend_bench: --burst takes fresh and connect_first, not %s\n",
                   std::string(name).c_str());
      return 1;
    }
    const bool fresh = name == "fresh";
    const int n = absl::GetFlag(FLAGS_streams), tokens = absl::GetFlag(FLAGS_tokens);
    std::vector<Call> calls = streams(n, tokens);
    engine.TakeEngineTimes();
    const double io0 = ThreadCpuSeconds("tpserve-http"), render0 = ThreadCpuSeconds("tpserve-render");
    const absl::Time t0 = absl::Now();
    RunCalls(calls, port, absl::Minutes(5), /*keep_open=*/false, fresh ? Burst::kFresh : Burst::kConnectFirst);
    const double io = ThreadCpuSeconds("tpserve-http") - io0, render = ThreadCpuSeconds("tpserve-render") - render0;
    const std::unordered_map<std::string, StubEngine::Times> engine_times = engine.TakeEngineTimes();
    // Per request: client TTFT (from its connect(); the first event's arrival, or its read),
    // and its share: that less the stub's own TTFT for the same request.
    std::vector<double> ttft_rx, ttft_read, share_rx, share_read, share_from_send, to_send, rx_to_read, engine_all,
        to_submit, token_to_rx;
    int ok = 0, unmatched = 0, with_later = 0;
    double last_sent_ms = 0;
    for (const Call& c : calls) {
      if (c.failed || c.events < tokens) continue;
      ++ok;
      ttft_rx.push_back(absl::ToDoubleMilliseconds(c.first_rx - c.start));
      ttft_read.push_back(absl::ToDoubleMilliseconds(c.first - c.start));
      to_send.push_back(absl::ToDoubleMilliseconds(c.sent_at - c.start));
      rx_to_read.push_back(absl::ToDoubleMilliseconds(c.first - c.first_rx));
      last_sent_ms = std::max(last_sent_ms, absl::ToDoubleMilliseconds(c.sent_at - t0));
      with_later += c.first_with_later ? 1 : 0;
      auto e = engine_times.find(c.id);
      if (e == engine_times.end()) {
        ++unmatched;
        continue;
      }
      const double engine_ms = absl::ToDoubleMilliseconds(e->second.first_token - e->second.submitted);
      engine_all.push_back(engine_ms);
      share_rx.push_back(ttft_rx.back() - engine_ms);
      share_read.push_back(ttft_read.back() - engine_ms);
      share_from_send.push_back(absl::ToDoubleMilliseconds(c.first - c.sent_at) - engine_ms);
      to_submit.push_back(absl::ToDoubleMilliseconds(e->second.submitted - c.start));
      token_to_rx.push_back(absl::ToDoubleMilliseconds(c.first_rx - e->second.first_token));
    }
    auto line = [](const char* what, const std::vector<double>& v, const char* note) {
      std::printf("    %-22s p50 %7.1f  p99 %7.1f  max %7.1f  %s\n", what, Percentile(v, 50), Percentile(v, 99),
                  Percentile(v, 100), note);
    };
    std::printf("(a) %d concurrent streams x %d tokens, steps of %g ms, %s: %d/%d complete; the client sent the "
                "last request %.1f ms after the first connect()\n",
                n, tokens, absl::GetFlag(FLAGS_step_ms),
                fresh ? "fresh (each connects and sends at once)" : "connect_first (all connect, then all send)", ok,
                n, last_sent_ms);
    line("engine TTFT ms", engine_all, "(stub: submit to first token)");
    if (fresh) {
      line("client TTFT ms", ttft_rx, "(its connect() to its first event's arrival, kernel stamp)");
      line("front end's share ms", share_rx, "(per request: client TTFT - its engine TTFT)  <- the figure");
      line("  in: to Submit", to_submit, "(connect() to the engine's Submit: accept, read, render pool, parse)");
      line("  out: token to client", token_to_rx, "(first token pushed to its arrival at the client)");
      line("  client's own send", to_send, "(connect() to request written, inside the above)");
      std::printf("    the client's loop read the first event p50 %.2f p99 %.2f ms after its arrival (not counted); "
                  "%d of %d first events arrived with a later one (stamped with the later one's arrival)\n",
                  Percentile(rx_to_read, 50), Percentile(rx_to_read, 99), with_later, ok);
    } else {
      line("client TTFT ms", ttft_read, "(connect() to first event read, the client's connect loop included)");
      line("front end's share ms", share_read, "(per request: client TTFT - its engine TTFT)");
      std::printf("    as reported before 2026-12-02: front end's share p50 %.1f ms, p99 %.1f ms "
                  "(client p - engine p)\n",
                  Percentile(ttft_read, 50) - Percentile(engine_all, 50),
                  Percentile(ttft_read, 99) - Percentile(engine_all, 99));
      line("  connect() to sent", to_send, "(the client's connect loop: counted above)");
      line("  share from send", share_from_send, "(the same, timed from the request's last byte written)");
    }
    if (unmatched > 0) std::printf("    %d complete streams had no engine TTFT to match (id not read)\n", unmatched);
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
