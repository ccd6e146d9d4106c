// TpServeService. Tested by tests/frontend_test.cc.
#include "coordinator/api/grpc_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/api/grpc_auth.h"
#include "coordinator/api/grpc_generate_reactor.h"
#include "coordinator/api/grpc_status.h"
#include "coordinator/api/process_info.h"
#include "coordinator/api/proto_utf8.h"

namespace tpserve {
absl::StatusOr<v1::GenerateRequest> ParseGenerateRequest(absl::string_view wire) {
  if (absl::Status s = CheckStringFieldsAreUtf8(wire, *v1::GenerateRequest::descriptor()); !s.ok()) return s;
  v1::GenerateRequest request;
  if (!request.ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
    return absl::InvalidArgumentError("the request is not a serialized tpserve.v1.GenerateRequest");
  }
  return request;
}

TpServeService::TpServeService(EngineApi& engine, const RequestBuilder& builder, FrontendMetrics* metrics,
                               std::weak_ptr<TaskPool> pump_pool, std::weak_ptr<TaskPool> render_pool,
                               ApiKeys api_keys)
    : engine_(engine),
      builder_(builder),
      metrics_(metrics),
      pump_pool_(std::move(pump_pool)),
      render_pool_(std::move(render_pool)),
      api_keys_(std::move(api_keys)) {}

grpc::ServerWriteReactor<grpc::ByteBuffer>* TpServeService::Generate(grpc::CallbackServerContext* context,
                                                                     const grpc::ByteBuffer* request) {
  const absl::Time arrival = absl::Now();
  std::string wire;
  if (auto* refused = AcceptGenerateCall(api_keys_, *context, *request, &wire)) return refused;
  // Parsed and built on the render pool, not on gRPC's callback thread: a long chat waits its
  // turn there, as a heavy task (at most all render threads but one).
  const bool heavy = wire.size() >= kHeavyRenderBytes;
  auto build = [this, wire = std::move(wire)]() -> absl::StatusOr<GenerateReactor::Built> {
    absl::StatusOr<v1::GenerateRequest> proto = ParseGenerateRequest(wire);
    if (!proto.ok()) return proto.status();
    absl::StatusOr<GenerateInput> input = GenerateInputFromProto(*proto);
    if (!input.ok()) return input.status();
    GenerateReactor::Built built;
    built.logprobs = proto->sampling().has_logprobs();
    built.tool_use = input->tool_use;
    built.tool_format = builder_.tool_call_format();
    const int32_t n = input->n;
    absl::StatusOr<ServeRequest> first = builder_.Build(*std::move(input), "gen-");
    if (!first.ok()) return first.status();
    built.later = MoreChoices(*first, n);
    built.first = *std::move(first);
    return built;
  };
  return GenerateReactor::Start({engine_, builder_.tokenizer(), metrics_, pump_pool_, render_pool_}, std::move(build),
                                arrival, heavy);
}

grpc::ServerUnaryReactor* TpServeService::ModelInfo(grpc::CallbackServerContext* context,
                                                    const v1::ModelInfoRequest* request,
                                                    v1::ModelInfoResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::Status s = AuthorizeGrpcCall(api_keys_, *context);
  if (s.ok()) s = builder_.CheckModel(request->model());
  if (!s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  const ::tpserve::ModelInfo& info = engine_.Info();
  for (const std::string& name : builder_.served_model_names()) response->add_served_model_names(name);
  response->set_architecture(info.architecture);
  response->set_parameter_count(info.parameter_count);
  response->set_dtype(info.dtype);
  response->set_tensor_parallel_size(info.tensor_parallel_size);
  response->set_pipeline_parallel_size(info.pipeline_parallel_size);
  response->set_pipeline_stages(info.pipeline_stages);
  response->set_pipeline_micro_batches(info.pipeline_micro_batches);
  for (const RankInfo& rank : info.ranks) {
    v1::Rank* r = response->add_ranks();
    r->set_rank(rank.rank);
    r->set_host(rank.host);
  }
  response->set_max_model_len(info.max_model_len);
  response->set_block_size(info.block_size);
  for (int64_t blocks : info.kv_blocks) response->add_kv_blocks(blocks);
  response->set_weights(info.weights);
  response->set_engine_version(info.engine_version);
  response->set_device(info.device);
  response->set_device_count(info.device_count);
  response->set_driver_version(info.driver_version);
  response->set_cuda_version(info.cuda_version);
  response->set_kernels(info.kernels);
  response->set_cpu_gemm(info.cpu_gemm);
  response->set_quantization(info.quantization);
  response->set_weight_formats(info.weight_formats);
  response->set_kv_cache_dtype(info.kv_cache_dtype);
  response->set_speculative_config(info.speculative_config);
  response->set_max_num_seqs(info.max_num_seqs);
  response->set_max_num_batched_tokens(info.max_num_batched_tokens);
  const GenerationDefaults& defaults = builder_.generation_defaults();
  v1::DefaultSamplingParams* d = response->mutable_default_sampling_params();
  if (defaults.temperature) d->set_temperature(*defaults.temperature);
  if (defaults.top_k) d->set_top_k(*defaults.top_k);
  if (defaults.top_p) d->set_top_p(*defaults.top_p);
  if (defaults.min_p) d->set_min_p(*defaults.min_p);
  if (defaults.repetition_penalty) d->set_repetition_penalty(*defaults.repetition_penalty);
  if (!defaults.empty()) d->set_source(defaults.source);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* TpServeService::Stats(grpc::CallbackServerContext* context,
                                                const v1::StatsRequest* request, v1::StatsResponse* response) {
  if (absl::Status key = AuthorizeGrpcCall(api_keys_, *context); !key.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(key));
    return reactor;
  }
  const EngineStats s = engine_.Stats();
  response->set_running(s.running);
  response->set_waiting(s.waiting);
  response->set_kv_usage(s.kv_usage);
  response->set_kv_bytes_touched(s.kv_bytes_touched);
  response->set_preemptions(s.preemptions);
  response->set_prefix_cache_hit_rate(s.prefix_cache_hit_rate);
  response->set_prompt_tokens(s.prompt_tokens);
  response->set_generation_tokens(s.generation_tokens);
  response->set_requests_finished(s.requests_finished);
  response->set_steps(s.steps);
  response->mutable_step_time()->set_compute_ms(s.compute_ms);
  response->mutable_step_time()->set_allreduce_ms(s.allreduce_ms);
  response->mutable_step_time()->set_pipeline_ms(s.pipeline_ms);
  response->mutable_step_time()->set_stages_busy_ms(s.stages_busy_ms);
  response->mutable_step_time()->set_scheduling_ms(s.scheduling_ms);
  response->mutable_step_time()->set_draft_ms(s.draft_ms);
  const ProcessMemory memory = ReadProcessMemory();
  response->set_rss_bytes(memory.rss_bytes);
  response->set_peak_rss_bytes(memory.peak_rss_bytes);
  response->set_weight_bytes(engine_.Info().weight_bytes);
  response->set_load_peak_rss_bytes(engine_.Info().load_peak_rss_bytes);
  v1::SpecDecodeStats* spec = response->mutable_spec_decode();
  spec->set_num_drafts(s.spec_num_drafts);
  spec->set_num_draft_tokens(s.spec_num_draft_tokens);
  spec->set_num_accepted_tokens(s.spec_num_accepted_tokens);
  for (int64_t n : s.spec_accepted_per_pos) spec->add_accepted_per_position(n);
  spec->set_mean_acceptance_length(
      s.spec_num_drafts == 0 ? 0.0 : 1.0 + static_cast<double>(s.spec_num_accepted_tokens) / s.spec_num_drafts);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tpserve
