// Collective helpers shared by every Communicator. Tested by tests/communicator_test.cc.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "worker/communicator.h"

namespace tpserve {

namespace {
[[noreturn]] void Unsupported(Communicator& c, const char* what) {
  std::fprintf(stderr, "tpserve: internal error: the %s communicator has no %s\n", c.name().c_str(), what);
  c.Abort(1);
  std::abort();  // not reached
}
}  // namespace

void Communicator::Send(const void*, size_t, int) { Unsupported(*this, "point-to-point sends"); }
void Communicator::Recv(void*, size_t, int) { Unsupported(*this, "point-to-point receives"); }
void Communicator::RecvMessage(std::vector<uint8_t>&, int) { Unsupported(*this, "point-to-point receives"); }
std::unique_ptr<Communicator> Communicator::Split(int) { Unsupported(*this, "split"); }

absl::Status Communicator::AgreeOnStatus(const absl::Status& local) {
  // Each rank contributes (failed ? rank : size); the minimum is the first failing rank.
  int64_t first = AllReduceMin(local.ok() ? size() : rank());
  if (first == size()) return absl::OkStatus();
  std::vector<uint8_t> msg;
  int32_t code = 0;
  if (rank() == first) {
    std::string text(local.message());
    msg.assign(text.begin(), text.end());
    code = static_cast<int32_t>(local.code());
  }
  host().Broadcast(&code, sizeof(code), static_cast<int>(first));
  BroadcastBytes(msg, static_cast<int>(first));
  std::string text(msg.begin(), msg.end());
  if (rank() != first) text = "rank " + std::to_string(first) + ": " + text;
  return absl::Status(static_cast<absl::StatusCode>(code), text);
}

std::vector<int64_t> Communicator::AllGatherInt64(int64_t v) {
  std::vector<int64_t> all(size());
  host().AllGather(&v, sizeof(v), all.data());
  return all;
}

int64_t Communicator::AllReduceMin(int64_t v) {
  const std::vector<int64_t> all = AllGatherInt64(v);
  return *std::min_element(all.begin(), all.end());
}

int64_t Communicator::AllReduceMax(int64_t v) {
  const std::vector<int64_t> all = AllGatherInt64(v);
  return *std::max_element(all.begin(), all.end());
}

void Communicator::BroadcastBytes(std::vector<uint8_t>& bytes, int root) {
  uint64_t n = bytes.size();
  host().BroadcastWaiting(&n, sizeof(n), root);
  bytes.resize(n);
  if (n > 0) host().Broadcast(bytes.data(), n, root);
}

}  // namespace tpserve
