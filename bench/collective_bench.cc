// How ranks wait in a collective, measured side by side in one run: MPI's blocking
// MPI_Allreduce (which spins) against the communicator's AllReduceSum (MPI_Iallreduce
// completed by polling that yields, then sleeps: worker/mpi_communicator.cc), alternated
// round by round. Each call is preceded by `--skew_us` of busy work on rank 0 only, as when
// rank 0 also runs the front end and the scheduler: the other ranks wait that long. Reports,
// per way and message size, the median time of a call on rank 0 (the latency the step sees)
// and the CPU time the other ranks spend per call (what their waits take from the node).
//   mpirun -np 2 build/bench/collective_bench --skew_us 0,200 --bytes 512,65536
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/median.h"

ABSL_FLAG(std::string, bytes, "512,16384,1048576", "Message sizes (fp32 elements x 4), comma-separated");
ABSL_FLAG(std::string, skew_us, "0,200", "Busy work on rank 0 before each call, microseconds, comma-separated");
ABSL_FLAG(int, calls, 2000, "Calls per round");
ABSL_FLAG(int, rounds, 4, "Rounds per way, alternated");

namespace tpserve {
namespace {

using Clock = std::chrono::steady_clock;

double ThreadCpuUs() {
  rusage u;
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_utime.tv_sec * 1e6 + u.ru_utime.tv_usec + u.ru_stime.tv_sec * 1e6 + u.ru_stime.tv_usec;
}

void BusyWait(int us) {
  const auto end = Clock::now() + std::chrono::microseconds(us);
  while (Clock::now() < end) {
  }
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(p, &v) || v < 0) {
      std::fprintf(stderr, "collective_bench: \"%s\" is not a non-negative integer\n", std::string(p).c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    out.push_back(v);
  }
  return out;
}

using bench::Median;

// Polls `req` until it completes: at full speed for 50 us, then yielding the core, then from
// 300 us sleeping between polls (20 us doubling up to 50 us).
void Poll(MPI_Request* req) {
  const auto start = Clock::now();
  auto nap = std::chrono::microseconds(20);
  while (true) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    const auto waited = Clock::now() - start;
    if (waited < std::chrono::microseconds(50)) continue;
    if (waited < std::chrono::microseconds(300)) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(50));
  }
}

enum class Way { kBlocking, kArrive, kNonblocking };
constexpr Way kWays[] = {Way::kBlocking, Way::kArrive, Way::kNonblocking};
constexpr const char* kWayNames[] = {"blocking", "arrive", "nonblocking"};

void AllReduce(Way way, std::vector<float>& v) {
  const int n = static_cast<int>(v.size());
  MPI_Request req;
  switch (way) {
    case Way::kBlocking:
      MPI_Allreduce(MPI_IN_PLACE, v.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Way::kArrive:
      MPI_Ibarrier(MPI_COMM_WORLD, &req);
      Poll(&req);
      MPI_Allreduce(MPI_IN_PLACE, v.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case Way::kNonblocking:
      MPI_Iallreduce(MPI_IN_PLACE, v.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
      Poll(&req);
      break;
  }
}

struct Round {
  double call_us;     // rank 0: per call, the skew excluded
  double waiter_cpu;  // the other ranks' CPU per call, averaged over them
};

Round RunRound(Way way, std::vector<float>& buf, int skew_us, int calls, int rank, int size) {
  MPI_Barrier(MPI_COMM_WORLD);
  double in_calls = 0;
  const double cpu0 = ThreadCpuUs();
  for (int i = 0; i < calls; ++i) {
    if (rank == 0) BusyWait(skew_us);
    const auto t0 = Clock::now();
    AllReduce(way, buf);
    in_calls += std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  double cpu = rank == 0 ? 0 : ThreadCpuUs() - cpu0;
  double others = 0;
  MPI_Reduce(&cpu, &others, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  return {in_calls / calls, others / std::max(1, size - 1) / calls};
}

int Run(int rank, int size) {
  const std::vector<int> sizes = ParseList(absl::GetFlag(FLAGS_bytes));
  const std::vector<int> skews = ParseList(absl::GetFlag(FLAGS_skew_us));
  const int calls = absl::GetFlag(FLAGS_calls), rounds = absl::GetFlag(FLAGS_rounds);
  if (rank == 0) {
    std::printf("%d ranks, %d calls x %d rounds per way, alternated; medians over rounds\n", size, calls, rounds);
    std::printf("%10s %8s | %-11s %12s %16s\n", "bytes", "skew_us", "way", "call us", "waiter cpu us");
  }
  for (int skew : skews) {
    for (int bytes : sizes) {
      std::vector<float> buf(std::max(1, bytes / 4), 1.0f);
      std::vector<double> us[3], cpu[3];
      for (int r = 0; r < rounds; ++r) {
        for (Way way : kWays) {
          const Round got = RunRound(way, buf, skew, calls, rank, size);
          us[static_cast<int>(way)].push_back(got.call_us);
          cpu[static_cast<int>(way)].push_back(got.waiter_cpu);
        }
      }
      for (int w = 0; rank == 0 && w < 3; ++w) {
        std::printf("%10d %8d | %-11s %12.1f %16.1f\n", bytes, skew, kWayNames[w], Median(us[w]), Median(cpu[w]));
      }
    }
  }
  return 0;
}
}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  absl::ParseCommandLine(argc, argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int rc = tpserve::Run(rank, size);
  MPI_Finalize();
  return rc;
}
