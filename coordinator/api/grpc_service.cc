// TpServeService and the GenerateRequest conversion. Tested by tests/frontend_test.cc.
#include "coordinator/api/grpc_service.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/api/grpc_generate_reactor.h"
#include "coordinator/api/grpc_status.h"
#include "coordinator/api/process_info.h"
#include "coordinator/api/proto_utf8.h"
#include "coordinator/engine/field_error.h"

namespace tpserve {
namespace {

void CopySampling(const v1::SamplingParams& s, GenerateInput* input) {
  SamplingParams& p = input->params;
  if (s.has_max_tokens()) {
    p.max_tokens = s.max_tokens();
    input->max_tokens_set = true;
  }
  // Unset fields stay unset, so that RequestBuilder gives them the model's defaults.
  input->explicit_sampling = {.temperature = s.has_temperature(),
                              .top_k = s.has_top_k(),
                              .top_p = s.has_top_p(),
                              .min_p = s.has_min_p(),
                              .repetition_penalty = s.has_repetition_penalty()};
  if (s.has_temperature()) p.temperature = s.temperature();
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_top_k()) p.top_k = s.top_k();
  if (s.has_min_p()) p.min_p = s.min_p();
  if (s.has_seed()) p.seed = s.seed();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  p.stop.assign(s.stop().begin(), s.stop().end());
  p.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  p.ignore_eos = s.ignore_eos();
  p.min_tokens = s.min_tokens();
  if (s.has_logprobs()) p.logprobs = s.logprobs();
  for (const auto& [id, bias] : s.logit_bias()) p.logit_bias.emplace_back(id, bias);
  std::sort(p.logit_bias.begin(), p.logit_bias.end());  // a map's order is unspecified
}

absl::Status CopyResponseFormat(const v1::ResponseFormat& f, GenerateInput* input) {
  switch (f.type()) {
    case v1::ResponseFormat::TYPE_TEXT:
      return absl::OkStatus();
    case v1::ResponseFormat::TYPE_JSON_OBJECT:
      input->response_format = ResponseFormat{ResponseFormat::Type::kJsonObject, ""};
      return absl::OkStatus();
    case v1::ResponseFormat::TYPE_JSON_SCHEMA:
      if (f.json_schema().empty()) {
        return FieldError("response_format.json_schema", "response_format.json_schema: the schema is required with TYPE_JSON_SCHEMA");
      }
      input->response_format = ResponseFormat{ResponseFormat::Type::kJsonSchema, f.json_schema()};
      return absl::OkStatus();
    default:
      return FieldError("response_format.type", absl::StrCat("response_format.type ", f.type(), " is not a known type"));
  }
}

// tools_json and tool_choice -> the same ToolUse as the OpenAI API's.
absl::Status CopyTools(const v1::GenerateRequest& request, GenerateInput* input) {
  using Json = nlohmann::ordered_json;
  Json tools;
  if (!request.tools_json().empty()) {
    tools = Json::parse(request.tools_json(), nullptr, /*allow_exceptions=*/false);
    if (tools.is_discarded()) return FieldError("tools_json", "tools_json is not valid JSON");
  }
  Json choice;
  const std::string& c = request.tool_choice();
  if (c == "auto" || c == "none" || c == "required") {
    choice = c;
  } else if (!c.empty()) {
    choice = Json{{"type", "function"}, {"function", {{"name", c}}}};
  }
  absl::StatusOr<ToolUse> use = ParseToolUse(tools, choice);
  if (!use.ok()) return use.status();
  input->tool_use = *std::move(use);
  return absl::OkStatus();
}

// The call's "authorization" metadata against the server's keys.
absl::Status Authorize(const ApiKeys& keys, const grpc::CallbackServerContext& context) {
  if (!keys.enabled()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  return keys.Check(it == metadata.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size()));
}

// A Generate call refused before it started: finishes at once with `status`.
class RefusedGenerate : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedGenerate(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

absl::StatusOr<v1::GenerateRequest> ParseGenerateRequest(absl::string_view wire) {
  if (absl::Status s = CheckStringFieldsAreUtf8(wire, *v1::GenerateRequest::descriptor()); !s.ok()) return s;
  v1::GenerateRequest request;
  if (!request.ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
    return absl::InvalidArgumentError("the request is not a serialized tpserve.v1.GenerateRequest");
  }
  return request;
}

absl::StatusOr<GenerateInput> GenerateInputFromProto(const v1::GenerateRequest& request) {
  GenerateInput input;
  input.model = request.model();
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      input.prompt = request.text();
      break;
    case v1::GenerateRequest::kTokenIds:
      input.prompt = std::vector<int32_t>(request.token_ids().ids().begin(), request.token_ids().ids().end());
      break;
    case v1::GenerateRequest::kChat: {
      ChatPrompt chat;
      for (int i = 0; i < request.chat().messages_size(); ++i) {
        const v1::ChatMessage& m = request.chat().messages(i);
        if (m.role().empty()) {
          const std::string field = "chat.messages[" + std::to_string(i) + "].role";
          return FieldError(field, field + " must not be empty");
        }
        chat.messages.push_back({{"role", m.role()}, {"content", m.content()}});
      }
      input.prompt = std::move(chat);
      break;
    }
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return FieldError("prompt", "prompt is required: set text, token_ids or chat");
  }
  CopySampling(request.sampling(), &input);
  if (absl::Status s = CopyResponseFormat(request.response_format(), &input); !s.ok()) return s;
  if (absl::Status s = CopyTools(request, &input); !s.ok()) return s;
  input.n = request.n() == 0 ? 1 : request.n();
  return input;
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
  if (absl::Status key = Authorize(api_keys_, *context); !key.ok()) return new RefusedGenerate(key);
  std::vector<grpc::Slice> slices;
  std::string wire;
  if (request->Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) wire.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
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
  absl::Status s = Authorize(api_keys_, *context);
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
  if (absl::Status key = Authorize(api_keys_, *context); !key.ok()) {
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
