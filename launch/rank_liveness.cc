// RankWatcher, RankLink, StartRankLiveness (see rank_liveness.h). Tested by
// tests/rank_liveness_test.cc.
#include "launch/rank_liveness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tpserve {
namespace {

constexpr char kHello[] = "tpserve-rank";  // "tpserve-rank RANK TOKEN\n"
constexpr char kBye[] = "bye";             // "bye\n"
constexpr size_t kMaxLine = 256;           // longer without a newline: not one of ours
constexpr size_t kMaxStrangers = 64;       // connections not yet introduced, at most

std::string Errno(absl::string_view what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

// A peer whose host vanished (power, network) sends no FIN: keepalive probes find it
// within ~10 s instead of the kernel's default two hours.
void KeepAlive(int fd) {
  int on = 1, idle_s = 5, interval_s = 1, probes = 5;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

bool SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Connects `fd` (blocking) to `addr` within `timeout`.
bool ConnectWithin(int fd, const sockaddr* addr, socklen_t len, absl::Duration timeout) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int rc = connect(fd, addr, len);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
    int err = 0;
    socklen_t err_len = sizeof(err);
    if (rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 && err == 0) {
      rc = 0;
    } else {
      errno = rc == 0 ? ETIMEDOUT : (err != 0 ? err : errno);
      rc = -1;
    }
  }
  fcntl(fd, F_SETFL, flags);
  return rc == 0;
}

std::string RandomToken() {
  std::random_device rd;
  std::string token;
  for (int i = 0; i < 4; ++i) absl::StrAppend(&token, absl::Hex(rd(), absl::kZeroPad8));
  return token;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RankWatcher>> RankWatcher::Start(const std::string& bind_address, std::string token,
                                                                LostFn on_lost) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;  // the kernel's choice
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (!bind_address.empty() && inet_pton(AF_INET, bind_address.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank liveness: \"", bind_address, "\" is not a numeric IPv4 address"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(Errno("rank liveness: socket"));
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = Errno(absl::StrCat("rank liveness: cannot listen on ",
                                               bind_address.empty() ? "0.0.0.0" : bind_address));
    close(fd);
    return absl::UnavailableError(why);
  }
  return std::unique_ptr<RankWatcher>(new RankWatcher(fd, ntohs(addr.sin_port), std::move(token), std::move(on_lost)));
}

RankWatcher::RankWatcher(int listen_fd, int port, std::string token, LostFn on_lost)
    : listen_fd_(listen_fd), port_(port), token_(std::move(token)), on_lost_(std::move(on_lost)) {
  if (pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;  // then only the listen fd wakes Run
  thread_ = std::thread([this] { Run(); });
}

RankWatcher::~RankWatcher() {
  if (wake_[1] >= 0) {
    const char c = 'x';
    while (write(wake_[1], &c, 1) < 0 && errno == EINTR) {
    }
  } else {
    shutdown(listen_fd_, SHUT_RDWR);  // poll() reports it
  }
  thread_.join();
  close(listen_fd_);
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

std::vector<int> RankWatcher::Connected() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out = connected_;
  std::sort(out.begin(), out.end());
  return out;
}

void RankWatcher::Run() {
  struct Conn {
    int fd = -1;
    int rank = -1;  // -1: not introduced yet
    std::string buf;
    bool bye = false;
    bool closed = false;
  };
  std::vector<Conn> conns;
  std::set<int> reported;
  auto forget = [&](int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    connected_.erase(std::remove(connected_.begin(), connected_.end(), rank), connected_.end());
  };
  while (true) {
    std::vector<pollfd> pfds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const Conn& c : conns) pfds.push_back({c.fd, POLLIN, 0});
    if (poll(pfds.data(), pfds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "tpserve: %s; rank liveness stops watching\n", Errno("rank liveness: poll").c_str());
      break;
    }
    if (pfds[0].revents != 0 || (pfds[1].revents & (POLLERR | POLLHUP)) != 0) break;  // the destructor
    std::vector<int> lost;
    for (size_t i = 0; i < conns.size(); ++i) {
      if (pfds[i + 2].revents == 0) continue;
      Conn& c = conns[i];
      char chunk[256];
      const ssize_t n = recv(c.fd, chunk, sizeof(chunk), 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n > 0) {
        c.buf.append(chunk, static_cast<size_t>(n));
        size_t nl;
        while (!c.closed && (nl = c.buf.find('\n')) != std::string::npos) {
          const std::string line = c.buf.substr(0, nl);
          c.buf.erase(0, nl + 1);
          if (c.rank < 0) {
            std::vector<std::string> words = absl::StrSplit(line, ' ');
            int rank = -1;
            if (words.size() == 3 && words[0] == kHello && absl::SimpleAtoi(words[1], &rank) && rank > 0 &&
                words[2] == token_) {
              c.rank = rank;
              std::lock_guard<std::mutex> lock(mu_);
              connected_.push_back(rank);
            } else {
              c.closed = true;  // a stranger: dropped unheard
            }
          } else if (line == kBye) {
            c.bye = true;
            forget(c.rank);
          }
        }
        if (c.buf.size() > kMaxLine) c.closed = true;
        if (!c.closed) continue;
      }
      // EOF, an error, or a stranger.
      c.closed = true;
      if (c.rank >= 0 && !c.bye) {
        forget(c.rank);
        if (reported.insert(c.rank).second) lost.push_back(c.rank);
      }
    }
    for (Conn& c : conns) {
      if (c.closed) close(c.fd);
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Conn& c) { return c.closed; }), conns.end());
    if ((pfds[1].revents & POLLIN) != 0) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        const size_t strangers = std::count_if(conns.begin(), conns.end(), [](const Conn& c) { return c.rank < 0; });
        if (strangers >= kMaxStrangers) {
          close(fd);
        } else {
          KeepAlive(fd);
          Conn c;
          c.fd = fd;
          conns.push_back(std::move(c));
        }
      }
    }
    for (int rank : lost) on_lost_(rank);
  }
  for (Conn& c : conns) close(c.fd);
}

absl::StatusOr<std::unique_ptr<RankLink>> RankLink::Connect(const std::string& host, int port, int rank,
                                                            const std::string& token, absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_family = AF_INET;  // the watcher listens on IPv4
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string where = absl::StrCat(host, ":", port);
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("rank liveness: cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (!ConnectWithin(fd, a->ai_addr, a->ai_addrlen, timeout)) {
      why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("rank liveness: cannot connect to ", where, ": ", why));
  KeepAlive(fd);
  if (!SendAll(fd, absl::StrCat(kHello, " ", rank, " ", token, "\n"))) {
    const std::string err = Errno(absl::StrCat("rank liveness: cannot write to ", where));
    close(fd);
    return absl::UnavailableError(err);
  }
  return std::unique_ptr<RankLink>(new RankLink(fd));
}

RankLink::~RankLink() {
  SendAll(fd_, absl::StrCat(kBye, "\n"));
  shutdown(fd_, SHUT_WR);
  close(fd_);
}

RankLiveness StartRankLiveness(Communicator& comm, const std::vector<std::string>& hosts,
                               RankWatcher::LostFn on_lost, const std::function<void(const std::string&)>& log) {
  // Rank 0's address, as every rank receives it; port 0: no channel.
  struct Address {
    int32_t port = 0;
    char host[64] = {0};
    char token[40] = {0};
  } addr;
  RankLiveness out;
  const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
  if (comm.rank() == 0) {
    const std::string token = RandomToken();
    // One host: loopback only. Several: every interface, found by rank 0's host name.
    auto watcher = RankWatcher::Start(one_host ? "127.0.0.1" : "", token, std::move(on_lost));
    if (watcher.ok()) {
      addr.port = (*watcher)->port();
      std::snprintf(addr.host, sizeof(addr.host), "%s", one_host ? "127.0.0.1" : hosts[0].c_str());
      std::snprintf(addr.token, sizeof(addr.token), "%s", token.c_str());
      out.watcher = std::move(*watcher);
    } else {
      log(absl::StrCat("warning: ", watcher.status().message(),
                       "; a rank that dies will drop open connections instead of ending them with an error"));
    }
  }
  comm.Broadcast(&addr, sizeof(addr), 0);
  if (comm.rank() == 0 || addr.port == 0) return out;
  // A rank on rank 0's host dials the loopback, whatever the host name resolves to.
  const bool beside_rank0 = static_cast<size_t>(comm.rank()) < hosts.size() && hosts[comm.rank()] == hosts[0];
  const std::string host = beside_rank0 ? "127.0.0.1" : std::string(addr.host);
  auto link = RankLink::Connect(host, addr.port, comm.rank(), addr.token, absl::Seconds(10));
  if (link.ok()) {
    out.link = std::move(*link);
  } else {
    log(absl::StrCat("warning: ", link.status().message(),
                     "; if this rank dies, rank 0 will drop open connections instead of ending them with an error"));
  }
  return out;
}

}  // namespace tpserve
