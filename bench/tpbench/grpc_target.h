// tpserve's own gRPC API (proto/tpserve.proto) as a tpbench target: Generate streams,
// ModelInfo for the run record, Stats for the server-side step-time split. Tested end to
// end by tests/tpbench_test.sh against a real server.
#ifndef TPSERVE_BENCH_TPBENCH_GRPC_TARGET_H_
#define TPSERVE_BENCH_TPBENCH_GRPC_TARGET_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bench/tpbench/target.h"

namespace tpserve::bench {

struct GrpcTargetOptions {
  std::string address;  // host:port
  std::string model;    // served model name; empty = the server's default
  bool chat = false;    // send the prompt as one user message (rendered with the chat template)
  // Keep each response's generated token ids (RequestOutcome::output_token_ids), for tpbench
  // compare's token-level output agreement.
  bool capture_output = false;
};

absl::StatusOr<std::unique_ptr<Target>> MakeGrpcTarget(GrpcTargetOptions options);

}  // namespace tpserve::bench

#endif  // TPSERVE_BENCH_TPBENCH_GRPC_TARGET_H_
