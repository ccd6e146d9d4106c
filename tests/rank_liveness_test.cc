// launch/rank_liveness.h in one process, no MPI: a worker killed with SIGKILL (a forked
// child) is reported at once and by rank; a bye, or the watcher's own end, is not a loss;
// strangers (wrong token, garbage) are dropped unheard; StartRankLiveness over thread ranks
// (LocalGroup) connects every worker.
#include "launch/rank_liveness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

// What on_lost reported, waited for.
struct Losses {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> ranks;
  RankWatcher::LostFn Fn() {
    return [this](int rank) {
      std::lock_guard<std::mutex> lock(mu);
      ranks.push_back(rank);
      cv.notify_all();
    };
  }
  // The ranks reported once `count` were, or after `timeout`.
  std::vector<int> Wait(size_t count, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, timeout, [&] { return ranks.size() >= count; });
    return ranks;
  }
};

bool WaitConnected(const RankWatcher& w, const std::vector<int>& want) {
  for (int i = 0; i < 500; ++i) {
    if (w.Connected() == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A raw client: what a stranger or a crashed worker would send.
int RawConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

TEST(RankLiveness, AKilledProcessIsReportedAtOnceByRank) {
  // The child forks before any thread exists here; it connects once told the port.
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int port = 0;
    if (read(to_child[0], &port, sizeof(port)) != sizeof(port)) _exit(2);
    auto link = RankLink::Connect("127.0.0.1", port, 3, "secret", absl::Seconds(5));
    const char ok = link.ok() ? 'y' : 'n';
    if (write(from_child[1], &ok, 1) != 1) _exit(2);
    pause();  // until SIGKILL: the link never says bye
    _exit(0);
  }
  Losses losses;
  auto w = RankWatcher::Start("127.0.0.1", "secret", losses.Fn());
  ASSERT_TRUE(w.ok()) << w.status();
  const int port = (*w)->port();
  ASSERT_EQ(write(to_child[1], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  char ok = 0;
  ASSERT_EQ(read(from_child[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  ASSERT_TRUE(WaitConnected(**w, {3}));

  const auto killed = std::chrono::steady_clock::now();
  kill(child, SIGKILL);
  EXPECT_EQ(losses.Wait(1, std::chrono::seconds(5)), std::vector<int>{3});
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(ms, 1000) << "the loss took " << ms << " ms to be reported";
  EXPECT_TRUE((*w)->Connected().empty());
  waitpid(child, nullptr, 0);
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
}

TEST(RankLiveness, ByeIsNotALoss) {
  Losses losses;
  auto w = RankWatcher::Start("127.0.0.1", "tok", losses.Fn());
  ASSERT_TRUE(w.ok()) << w.status();
  {
    auto a = RankLink::Connect("127.0.0.1", (*w)->port(), 1, "tok", absl::Seconds(5));
    auto b = RankLink::Connect("localhost", (*w)->port(), 2, "tok", absl::Seconds(5));
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(WaitConnected(**w, {1, 2}));
  }  // both say bye
  ASSERT_TRUE(WaitConnected(**w, {}));
  EXPECT_TRUE(losses.Wait(1, std::chrono::milliseconds(300)).empty());
}

TEST(RankLiveness, AConnectionClosedWithoutByeIsALossReportedOnce) {
  Losses losses;
  auto w = RankWatcher::Start("", "tok", losses.Fn());  // every interface
  ASSERT_TRUE(w.ok()) << w.status();
  const int fd = RawConnect((*w)->port());
  const std::string hello = "tpserve-rank 5 tok\n";
  ASSERT_EQ(send(fd, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  ASSERT_TRUE(WaitConnected(**w, {5}));
  close(fd);
  EXPECT_EQ(losses.Wait(1, std::chrono::seconds(5)), std::vector<int>{5});
  EXPECT_EQ(losses.Wait(2, std::chrono::milliseconds(300)), std::vector<int>{5});
}

TEST(RankLiveness, StrangersAreDroppedUnheard) {
  Losses losses;
  auto w = RankWatcher::Start("127.0.0.1", "right", losses.Fn());
  ASSERT_TRUE(w.ok()) << w.status();
  for (const std::string& sent : {std::string("tpserve-rank 1 wrong\n"), std::string("GET / HTTP/1.1\r\n\r\n"),
                                  std::string("tpserve-rank 0 right\n"), std::string(1000, 'x')}) {
    const int fd = RawConnect((*w)->port());
    send(fd, sent.data(), sent.size(), MSG_NOSIGNAL);
    close(fd);
  }
  auto ok = RankLink::Connect("127.0.0.1", (*w)->port(), 1, "right", absl::Seconds(5));
  ASSERT_TRUE(ok.ok());
  ASSERT_TRUE(WaitConnected(**w, {1}));
  EXPECT_TRUE(losses.Wait(1, std::chrono::milliseconds(300)).empty());
}

TEST(RankLiveness, TheWatchersEndReportsNothing) {
  Losses losses;
  std::unique_ptr<RankLink> link;
  {
    auto w = RankWatcher::Start("127.0.0.1", "tok", losses.Fn());
    ASSERT_TRUE(w.ok());
    auto l = RankLink::Connect("127.0.0.1", (*w)->port(), 1, "tok", absl::Seconds(5));
    ASSERT_TRUE(l.ok());
    link = std::move(*l);
    ASSERT_TRUE(WaitConnected(**w, {1}));
  }
  link.reset();  // a bye to a closed peer: no SIGPIPE, no report
  EXPECT_TRUE(losses.ranks.empty());
}

TEST(RankLiveness, ConnectFailsClearly) {
  auto bad = RankWatcher::Start("not-an-address", "tok", [](int) {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  // A port nobody listens on: the one a closed watcher had.
  int port = 0;
  {
    auto w = RankWatcher::Start("127.0.0.1", "tok", [](int) {});
    ASSERT_TRUE(w.ok());
    port = (*w)->port();
  }
  auto l = RankLink::Connect("127.0.0.1", port, 1, "tok", absl::Seconds(2));
  EXPECT_EQ(l.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(l.status().message().find("cannot connect to 127.0.0.1:"), std::string::npos) << l.status();
}

TEST(RankLiveness, StartRankLivenessConnectsEveryRank) {
  constexpr int kRanks = 3;
  LocalGroup group(kRanks);
  Losses losses;
  std::vector<RankLiveness> sides(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = group.Rank(r);
      sides[r] = StartRankLiveness(*comm, {"node-a", "node-a", "node-a"}, losses.Fn(),
                                   [](const std::string& msg) { ADD_FAILURE() << msg; });
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_NE(sides[0].watcher, nullptr);
  EXPECT_EQ(sides[0].link, nullptr);
  for (int r = 1; r < kRanks; ++r) EXPECT_NE(sides[r].link, nullptr) << r;
  ASSERT_TRUE(WaitConnected(*sides[0].watcher, {1, 2}));
  sides[1].link.reset();  // a clean exit
  ASSERT_TRUE(WaitConnected(*sides[0].watcher, {2}));
  EXPECT_TRUE(losses.Wait(1, std::chrono::milliseconds(300)).empty());
}

}  // namespace
}  // namespace tpserve
