// tpserve's gRPC API as a tpbench target (see grpc_target.h).
#include "bench/tpbench/grpc_target.h"

#include <chrono>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "proto/tpserve.grpc.pb.h"

namespace tpserve::bench {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(what, ": ", s.error_message()));
}

class GrpcTarget : public Target {
 public:
  explicit GrpcTarget(GrpcTargetOptions o)
      : options_(std::move(o)),
        channel_(grpc::CreateChannel(options_.address, grpc::InsecureChannelCredentials())),
        stub_(v1::TpServe::NewStub(channel_)) {}

  std::string Name() const override { return absl::StrCat("grpc://", options_.address); }
  bool AcceptsTokenIds() const override { return !options_.chat; }

  RequestOutcome Send(const BenchRequest& request, absl::Duration timeout) override {
    v1::GenerateRequest r;
    r.set_model(options_.model);
    if (options_.chat) {
      v1::ChatMessage* m = r.mutable_chat()->add_messages();
      m->set_role("user");
      m->set_content(request.text);
    } else if (!request.token_ids.empty()) {
      r.mutable_token_ids()->mutable_ids()->Add(request.token_ids.begin(), request.token_ids.end());
    } else {
      r.set_text(request.text);
    }
    v1::SamplingParams* sp = r.mutable_sampling();
    sp->set_max_tokens(request.max_tokens);
    sp->set_ignore_eos(request.ignore_eos);
    if (request.temperature.has_value()) sp->set_temperature(*request.temperature);

    RequestOutcome out;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(timeout));
    StreamClock clock;
    auto reader = stub_->Generate(&context, r);
    v1::GenerateResponse m;
    bool finished = false;
    if (options_.capture_output) out.output_token_ids.emplace();
    while (reader->Read(&m)) {
      clock.OnChunk(m.token_ids_size());
      if (options_.capture_output) out.output_token_ids->insert(out.output_token_ids->end(), m.token_ids().begin(), m.token_ids().end());
      out.prompt_tokens = m.usage().prompt_tokens();
      out.completion_tokens = m.usage().completion_tokens();
      if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        finished = true;
        out.finish_reason = m.finish_reason() == v1::FINISH_REASON_STOP ? "stop" : "length";
        out.server_queue_ms = m.timings().queue_ms();
      }
    }
    const grpc::Status status = reader->Finish();
    clock.Finish(&out);
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      out.timeout = true;
      out.error = absl::StrCat("timed out after ", absl::ToInt64Milliseconds(timeout), " ms (",
                               clock.tokens_seen(), " tokens received)");
    } else if (!status.ok()) {
      out.error = absl::StrCat("gRPC ", absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())), ": ",
                               status.error_message());
    } else if (!finished) {
      out.error = "stream ended before the response finished";
    } else {
      out.success = true;
    }
    return out;
  }

  absl::StatusOr<ServerInfo> Info() override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ModelInfoRequest request;
    request.set_model(options_.model);
    v1::ModelInfoResponse r;
    grpc::Status s = stub_->ModelInfo(&context, request, &r);
    if (!s.ok()) return FromGrpc(s, absl::StrCat("ModelInfo from ", options_.address));
    ServerInfo info;
    info.model = r.served_model_names_size() > 0 ? r.served_model_names(0) : "";
    info.engine_version = r.engine_version();
    info.dtype = r.dtype();
    info.quantization = r.quantization();
    info.kv_cache_dtype = r.kv_cache_dtype();
    info.weights = r.weights();
    info.tp_size = r.tensor_parallel_size();
    info.pp_size = r.pipeline_parallel_size();
    info.pipeline_stages = r.pipeline_stages();
    info.pipeline_micro_batches = r.pipeline_micro_batches();
    info.max_model_len = r.max_model_len();
    for (const v1::Rank& rank : r.ranks()) info.hosts.push_back(rank.host());
    info.device = r.device();
    info.device_count = r.device_count();
    info.driver_version = r.driver_version();
    info.cuda_version = r.cuda_version();
    info.max_num_seqs = r.max_num_seqs();
    info.kernels = r.kernels();
    info.speculative_config = r.speculative_config();
    return info;
  }

  absl::StatusOr<ServerCounters> Counters() override {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StatsResponse r;
    grpc::Status s = stub_->Stats(&context, v1::StatsRequest(), &r);
    if (!s.ok()) return FromGrpc(s, absl::StrCat("Stats from ", options_.address));
    ServerCounters c;
    c.steps = r.steps();
    c.compute_ms = r.step_time().compute_ms();
    c.allreduce_ms = r.step_time().allreduce_ms();
    // tpbench's scheduling share keeps drafting in it (the server reports it apart).
    c.scheduling_ms = r.step_time().scheduling_ms() + r.step_time().draft_ms();
    c.pipeline_ms = r.step_time().pipeline_ms();
    c.stages_busy_ms = r.step_time().stages_busy_ms();
    c.preemptions = r.preemptions();
    c.prefix_cache_hit_rate = r.prefix_cache_hit_rate();
    c.peak_rss_bytes = r.peak_rss_bytes();
    c.spec_drafts = r.spec_decode().num_drafts();
    c.spec_draft_tokens = r.spec_decode().num_draft_tokens();
    c.spec_accepted_tokens = r.spec_decode().num_accepted_tokens();
    return c;
  }

 private:
  const GrpcTargetOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TpServe::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Target>> MakeGrpcTarget(GrpcTargetOptions options) {
  if (options.address.empty() || options.address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--target grpc://HOST:PORT needs a host and a port, got \"", options.address, "\""));
  }
  return std::unique_ptr<Target>(new GrpcTarget(std::move(options)));
}

}  // namespace tpserve::bench
