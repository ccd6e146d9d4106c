// The gRPC server end to end (tests/frontend_fixture.h): streaming, concurrency, cancel and
// deadline, errors, ModelInfo/Stats, health; shutdown; `tpserve client` against both servers;
// RequestBuilder's bounds on a prompt's work before admission.
#include <atomic>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"
#include "grpcpp/generic/generic_stub.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/engine/field_error.h"
#include "coordinator/structured/token_matcher.h"
#include "launch/client_command.h"
#include "proto/reflection_client.pb.h"
#include "tests/frontend_fixture.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST_F(FrontendTest, GrpcGenerateStreamsTokensThenFinishes) {
  StartServers();
  std::vector<v1::GenerateResponse> responses;
  grpc::Status status = Generate(TextRequest("Hello world", 8), &responses);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_FALSE(responses.empty());
  std::vector<int32_t> ids;
  std::string text;
  for (const auto& r : responses) {
    EXPECT_THAT(r.request_id(), ::testing::StartsWith("gen-"));
    ids.insert(ids.end(), r.token_ids().begin(), r.token_ids().end());
    text += r.text();
  }
  const v1::GenerateResponse& last = responses.back();
  EXPECT_EQ(ids.size(), 8u);
  EXPECT_EQ(text, tokenizer_->Decode(ids, /*skip_special_tokens=*/true));
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().completion_tokens(), 8);
  EXPECT_EQ(last.usage().prompt_tokens(), static_cast<int>(tokenizer_->Encode("Hello world", true).size()));
  EXPECT_GT(last.timings().first_token_ms(), 0);
  EXPECT_GE(last.timings().decode_ms(), 0);
  for (size_t i = 0; i + 1 < responses.size(); ++i) {
    EXPECT_EQ(responses[i].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  }
  EXPECT_EQ(engine_->last_request().params.max_tokens, 8);
}

TEST_F(FrontendTest, GrpcLastResponseSaysWhichStopMatched) {
  StartServers();
  // The fake engine echoes the prompt's ids: the third is a stop token id.
  v1::GenerateRequest request;
  for (int32_t id : {11, 12, 13, 14}) request.mutable_token_ids()->add_ids(id);
  request.mutable_sampling()->set_max_tokens(8);
  request.mutable_sampling()->add_stop_token_ids(13);
  std::vector<v1::GenerateResponse> responses;
  ASSERT_TRUE(Generate(request, &responses).ok());
  ASSERT_FALSE(responses.empty());
  EXPECT_EQ(responses.back().finish_reason(), v1::FINISH_REASON_STOP);
  ASSERT_TRUE(responses.back().has_stop_token_id());
  EXPECT_EQ(responses.back().stop_token_id(), 13);
  EXPECT_EQ(responses.back().stop_string(), "");
  // Ended by its length: neither.
  responses.clear();
  ASSERT_TRUE(Generate(TextRequest("Hello", 2), &responses).ok());
  EXPECT_FALSE(responses.back().has_stop_token_id());
}

TEST_F(FrontendTest, GrpcTokenIdsChatAndSamplingReachTheEngine) {
  StartServers();
  v1::GenerateRequest ids_request;
  for (int id : {10, 11, 12}) ids_request.mutable_token_ids()->add_ids(id);
  v1::SamplingParams* s = ids_request.mutable_sampling();
  s->set_temperature(0);
  s->set_top_k(5);
  s->set_seed(9);
  s->add_stop("x");
  s->add_stop_token_ids(99);
  s->set_logprobs(2);
  std::vector<v1::GenerateResponse> responses;
  ASSERT_TRUE(Generate(ids_request, &responses).ok());
  ServeRequest seen = engine_->last_request();
  EXPECT_THAT(seen.prompt_ids, ::testing::ElementsAre(10, 11, 12));
  EXPECT_EQ(seen.params.max_tokens, 16);  // the completions default
  EXPECT_EQ(seen.params.temperature, 0);
  EXPECT_EQ(seen.params.top_k, 5);
  EXPECT_EQ(seen.params.seed, 9u);
  EXPECT_THAT(seen.params.stop, ::testing::ElementsAre("x"));
  EXPECT_THAT(seen.params.stop_token_ids, ::testing::ElementsAre(99));
  ASSERT_FALSE(responses.empty());
  ASSERT_GT(responses[0].logprobs_size(), 0);
  EXPECT_EQ(responses[0].logprobs(0).token_id(), 10);
  EXPECT_EQ(responses[0].logprobs(0).top_size(), 2);
  EXPECT_FLOAT_EQ(responses[0].logprobs(0).logprob(), -0.5f);

  v1::GenerateRequest chat;
  v1::ChatMessage* m = chat.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Hi");
  chat.mutable_sampling()->set_max_tokens(2);
  responses.clear();
  ASSERT_TRUE(Generate(chat, &responses).ok());
  ApplyChatTemplateOptions generation_prompt;
  generation_prompt.add_generation_prompt = true;
  auto rendered =
      chat_template_->Apply(Json::parse(R"([{"role": "user", "content": "Hi"}])"), generation_prompt);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(engine_->last_request().prompt_ids, tokenizer_->Encode(*rendered, /*add_special_tokens=*/false));
  EXPECT_THAT(*rendered, ::testing::EndsWith("<|im_start|>assistant\n"));
}

// response_format compiles into the request's grammar on the front end (a bad schema is
// INVALID_ARGUMENT naming the keyword); logit_bias reaches the engine sorted by id.
TEST_F(FrontendTest, GrpcResponseFormatAndLogitBias) {
  StartServers();
  v1::GenerateRequest request = TextRequest("Hi", 4);
  request.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_JSON_SCHEMA);
  request.mutable_response_format()->set_json_schema(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  (*request.mutable_sampling()->mutable_logit_bias())[7] = -3.5f;
  (*request.mutable_sampling()->mutable_logit_bias())[2] = 1.0f;
  std::vector<v1::GenerateResponse> responses;
  ASSERT_TRUE(Generate(request, &responses).ok());
  ServeRequest seen = engine_->last_request();
  ASSERT_NE(seen.params.grammar, nullptr);
  TokenMatcher matcher(seen.params.grammar);
  EXPECT_FALSE(matcher.CanEnd());
  EXPECT_EQ(seen.params.logit_bias, (std::vector<std::pair<int32_t, float>>{{2, 1.0f}, {7, -3.5f}}));

  request.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_JSON_OBJECT);
  ASSERT_TRUE(Generate(request, &responses).ok());
  EXPECT_NE(engine_->last_request().params.grammar, nullptr);
  request.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_TEXT);
  ASSERT_TRUE(Generate(request, &responses).ok());
  EXPECT_EQ(engine_->last_request().params.grammar, nullptr);

  request.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_JSON_SCHEMA);
  request.mutable_response_format()->set_json_schema(R"({"type": "integer", "minimum": 3})");
  grpc::Status status = Generate(request, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("keyword 'minimum' at # is not supported"));
  request.mutable_response_format()->set_json_schema("");
  status = Generate(request, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("the schema is required"));
}

// n = 3: three engine requests, each choice's messages carry its index and end with its own
// finish reason. Tools (auto, the Qwen template's hermes syntax): the fake engine echoes the
// prompt, whose user message holds a call, which comes back as tool_calls.
TEST_F(FrontendTest, GrpcChoicesAndToolCalls) {
  FakeEngineOptions options;
  options.max_model_len = 2048;  // the tools' system block makes a long prompt
  options.token_delay = absl::ZeroDuration();
  StartServers(options);
  v1::GenerateRequest request = TextRequest("Hello there", 3);
  request.set_n(3);
  std::vector<v1::GenerateResponse> responses;
  ASSERT_TRUE(Generate(request, &responses).ok());
  std::set<std::string> ids;
  std::map<int, int> finished;
  for (const v1::GenerateResponse& r : responses) {
    ids.insert(r.request_id());
    if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) ++finished[r.index()];
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(finished, (std::map<int, int>{{0, 1}, {1, 1}, {2, 1}}));

  v1::GenerateRequest chat;
  v1::ChatMessage* m = chat.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  chat.set_tools_json(R"([{"type": "function", "function": {"name": "get"}}])");
  chat.mutable_sampling()->set_max_tokens(400);  // the echo reaches the user's message
  responses.clear();
  grpc::Status done = Generate(chat, &responses);
  ASSERT_TRUE(done.ok()) << done.error_message();
  std::vector<v1::ToolCall> calls;
  std::string text;
  for (const v1::GenerateResponse& r : responses) {
    calls.insert(calls.end(), r.tool_calls().begin(), r.tool_calls().end());
    text += r.text();
  }
  ASSERT_EQ(calls.size(), 1u) << text;
  EXPECT_EQ(calls[0].name(), "get");
  EXPECT_EQ(calls[0].arguments(), R"({"city":"Paris"})");
  EXPECT_EQ(text.find("Paris"), std::string::npos) << text;  // the call is not also content
  EXPECT_EQ(responses.back().finish_reason(), v1::FINISH_REASON_LENGTH);  // the echo ran to max_tokens

  chat.set_tool_choice("nothing_like_it");
  grpc::Status status = Generate(chat, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("nothing_like_it"));
  chat.set_tools_json("[1,");
  status = Generate(chat, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("tools_json"));
}

TEST_F(FrontendTest, GrpcManyConcurrentStreams) {
  StartServers();
  constexpr int kClients = 24;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      std::vector<v1::GenerateResponse> responses;
      grpc::Status status = Generate(TextRequest(absl::StrCat("prompt number ", i), 20), &responses);
      int tokens = 0;
      for (const auto& r : responses) tokens += r.token_ids_size();
      if (status.ok() && tokens == 20 && responses.back().finish_reason() == v1::FINISH_REASON_LENGTH) ++ok;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), kClients);
  EXPECT_EQ(engine_->cancelled(), 0);
}

TEST_F(FrontendTest, GrpcClientCancelCancelsTheRequest) {
  StartServers(Slow());
  grpc::ClientContext context;
  auto reader = stub_->Generate(&context, TextRequest("Hello", 200));
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));
  context.TryCancel();
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(engine_->WaitForCancelled(1, absl::Seconds(10)));
}

TEST_F(FrontendTest, GrpcDeadlineCancelsTheRequest) {
  StartServers(Slow());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  auto reader = stub_->Generate(&context, TextRequest("Hello", 200));
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(engine_->WaitForCancelled(1, absl::Seconds(10)));
}

TEST_F(FrontendTest, GrpcErrors) {
  StartServers();
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest unknown = TextRequest("Hi", 2);
  unknown.set_model("no-such-model");
  grpc::Status status = Generate(unknown, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("served models: fake-model"));

  status = Generate(TextRequest("", 2), &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("prompt"));

  status = Generate(v1::GenerateRequest(), &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("prompt is required"));

  v1::GenerateRequest hot = TextRequest("Hi", 2);
  hot.mutable_sampling()->set_temperature(-1);
  status = Generate(hot, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("temperature"));

  status = Generate(TextRequest("Hi", 1000), &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("max_model_len (256)"));

  // Out-of-range fields are refused as HTTP refuses them (one SamplingParams::Validate).
  v1::GenerateRequest minus = TextRequest("Hi", 2);
  minus.mutable_sampling()->set_logprobs(-1);
  status = Generate(minus, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("logprobs must be in [0, 20], got -1"));
  v1::GenerateRequest top_p = TextRequest("Hi", 2);
  top_p.mutable_sampling()->set_top_p(0);
  status = Generate(top_p, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("top_p must be in (0, 1]"));

  // gRPC's own size check (GrpcListenOptions::max_receive_message_bytes, 4 MiB).
  status = Generate(TextRequest(std::string(5 << 20, 'a'), 2), &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // A chat role no template is written for (frontend_http_test: HttpChatRefusesUnknownRoles).
  v1::GenerateRequest wizard;
  v1::ChatMessage* m = wizard.mutable_chat()->add_messages();
  m->set_role("wizard");
  m->set_content("abracadabra");
  status = Generate(wizard, &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("messages[0].role \"wizard\" is not a role"));
  EXPECT_THAT(status.error_message(), HasSubstr("system, user, assistant, tool"));

  engine_->SetSubmitError(absl::ResourceExhaustedError("waiting queue is full"));
  status = Generate(TextRequest("Hi", 2), &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("waiting queue is full"));
  EXPECT_TRUE(responses.empty());
}

// Generate sent as bytes (a generic call), so a test can send what the typed stub would not
// serialize as is. The call's status; `responses`: how many messages came back.
grpc::Status RawGenerate(const std::shared_ptr<grpc::Channel>& channel, const std::string& wire,
                         int* responses = nullptr) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  // One operation at a time: each Next() returns the one just started.
  auto done = [&cq] {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    return ok;
  };
  void* const tag = reinterpret_cast<void*>(1);
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, "/tpserve.v1.TpServe/Generate", &cq);
  call->StartCall(tag);
  done();
  grpc::Slice slice(wire);
  call->WriteLast(grpc::ByteBuffer(&slice, 1), grpc::WriteOptions(), tag);
  done();
  grpc::ByteBuffer response;
  int n = 0;
  for (call->Read(&response, tag); done(); call->Read(&response, tag)) ++n;
  grpc::Status status;
  call->Finish(&status, tag);
  done();
  if (responses != nullptr) *responses = n;
  return status;
}

// The ERROR lines protobuf and gRPC log while it lives.
class ErrorLogRecorder {
 public:
  ErrorLogRecorder() {
    lines().clear();
    previous_ = google::protobuf::SetLogHandler(&OnProtobuf);
    gpr_set_log_function(&OnGrpc);
  }
  ~ErrorLogRecorder() {
    google::protobuf::SetLogHandler(previous_);
    gpr_set_log_function(nullptr);
  }
  static std::vector<std::string>& lines() {
    static auto* recorded = new std::vector<std::string>;
    return *recorded;
  }

 private:
  static void OnProtobuf(google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
    if (level >= google::protobuf::LOGLEVEL_ERROR) lines().push_back(absl::StrCat("protobuf: ", message));
  }
  static void OnGrpc(gpr_log_func_args* args) {
    if (args->severity == GPR_LOG_SEVERITY_ERROR) lines().push_back(absl::StrCat("grpc: ", args->message));
  }
  google::protobuf::LogHandler* previous_;
};

// A string field that is not UTF-8 (proto3 strings must be) is INVALID_ARGUMENT naming the
// field, not the UNIMPLEMENTED gRPC answers when its parser refuses a request, and nothing is
// logged as an ERROR.
TEST_F(FrontendTest, GrpcRefusesStringsThatAreNotUtf8) {
  StartServers();
  // Serialized with placeholders, which are then replaced by bytes that are not UTF-8 (the
  // typed stub would log an ERROR of its own serializing them).
  auto with_bad_bytes = [](const v1::GenerateRequest& request) {
    std::string wire = request.SerializeAsString();
    for (size_t at; (at = wire.find("@@")) != std::string::npos;) wire.replace(at, 2, "\xff\xc3");
    return wire;
  };
  ErrorLogRecorder errors;
  grpc::Status status = RawGenerate(channel_, with_bad_bytes(TextRequest("Hi @@ there", 2)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("text is not valid UTF-8"));

  v1::GenerateRequest chat;
  for (const char* content : {"fine", "bad @@"}) {
    v1::ChatMessage* m = chat.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(content);
  }
  status = RawGenerate(channel_, with_bad_bytes(chat));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("chat.messages[1].content is not valid UTF-8"));

  v1::GenerateRequest stop = TextRequest("Hi", 2);
  stop.mutable_sampling()->add_stop("ok");
  stop.mutable_sampling()->add_stop("@@");
  status = RawGenerate(channel_, with_bad_bytes(stop));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("sampling.stop[1] is not valid UTF-8"));

  // Bytes that are no GenerateRequest at all (a length past the end).
  status = RawGenerate(channel_, std::string("\x12\x09Hi", 4));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("not a serialized tpserve.v1.GenerateRequest"));
  EXPECT_EQ(engine_->submitted(), 0);
  EXPECT_THAT(ErrorLogRecorder::lines(), ::testing::IsEmpty());

  // The same path with valid text streams as the typed stub's call does.
  int responses = 0;
  status = RawGenerate(channel_, TextRequest("Hi \u00e9 there", 3).SerializeAsString(), &responses);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_GT(responses, 0);
  EXPECT_EQ(engine_->submitted(), 1);
}

// --api-key: every tpserve.v1 call needs the metadata "authorization: Bearer KEY", else
// UNAUTHENTICATED before any work; grpc.health.v1 stays open.
TEST_F(FrontendTest, GrpcApiKeys) {
  grpc_options_.frontend.api_keys = {"key-one", "key-two"};
  StartServers();
  auto with_key = [](grpc::ClientContext& context, const std::string& authorization) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  };
  auto generate = [&](const std::string& authorization) {
    grpc::ClientContext context;
    with_key(context, authorization);
    auto reader = stub_->Generate(&context, TextRequest("Hello", 2));
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
    }
    return reader->Finish();
  };
  auto model_info = [&](const std::string& authorization) {
    grpc::ClientContext context;
    with_key(context, authorization);
    v1::ModelInfoResponse info;
    return stub_->ModelInfo(&context, v1::ModelInfoRequest(), &info);
  };
  auto stats = [&](const std::string& authorization) {
    grpc::ClientContext context;
    with_key(context, authorization);
    v1::StatsResponse response;
    return stub_->Stats(&context, v1::StatsRequest(), &response);
  };
  for (const std::string& authorization : {std::string(), std::string("Bearer key-three"), std::string("key-one")}) {
    for (const grpc::Status& s : {generate(authorization), model_info(authorization), stats(authorization)}) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << authorization << ": " << s.error_message();
      EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("key-one")));
    }
  }
  EXPECT_THAT(generate("").error_message(), HasSubstr("authorization: Bearer <key>"));
  EXPECT_EQ(engine_->submitted(), 0);
  for (const char* authorization : {"Bearer key-one", "Bearer key-two"}) {
    EXPECT_TRUE(generate(authorization).ok());
    EXPECT_TRUE(model_info(authorization).ok());
    EXPECT_TRUE(stats(authorization).ok());
  }
  EXPECT_EQ(engine_->submitted(), 2);
  EXPECT_EQ(HealthStatus(""), grpc::health::v1::HealthCheckResponse::SERVING);
}

// `tpserve client --api-key` against both servers with keys; without one it says why it failed.
TEST_F(FrontendTest, ClientCommandSendsTheApiKey) {
  grpc_options_.frontend.api_keys = {"key-one"};
  http_options_.frontend.api_keys = {"key-one"};
  StartServers();
  for (bool grpc : {true, false}) {
    ClientCommandOptions o;
    if (grpc) {
      o.grpc_target = absl::StrCat("127.0.0.1:", grpc_->port());
    } else {
      o.http_url = absl::StrCat("http://127.0.0.1:", http_->port());
    }
    o.prompt = "Hello world";
    o.max_tokens = 3;
    std::ostringstream streamed;
    absl::StatusOr<ClientResult> refused = RunClientRequest(o, streamed);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
    o.api_key = "key-one";
    absl::StatusOr<ClientResult> r = RunClientRequest(o, streamed);
    ASSERT_TRUE(r.ok()) << r.status() << " grpc=" << grpc;
    EXPECT_EQ(r->completion_tokens, 3);
  }
}

TEST_F(FrontendTest, GrpcModelInfoAndStats) {
  StartServers({}, {"alias-a", "alias-b"});
  grpc::ClientContext c1;
  v1::ModelInfoRequest info_request;
  v1::ModelInfoResponse info;
  ASSERT_TRUE(stub_->ModelInfo(&c1, info_request, &info).ok());
  EXPECT_THAT(info.served_model_names(), ::testing::ElementsAre("alias-a", "alias-b"));
  EXPECT_EQ(info.architecture(), "fake");
  EXPECT_EQ(info.parameter_count(), 1234);
  EXPECT_EQ(info.dtype(), "bfloat16");
  EXPECT_EQ(info.tensor_parallel_size(), 2);
  ASSERT_EQ(info.ranks_size(), 2);
  EXPECT_EQ(info.ranks(1).host(), "node-b");
  EXPECT_EQ(info.max_model_len(), 256);
  EXPECT_THAT(info.kv_blocks(), ::testing::ElementsAre(100, 50));
  EXPECT_EQ(info.device(), "CPU: fake");
  EXPECT_EQ(info.device_count(), 0);
  EXPECT_EQ(info.driver_version(), "none");
  EXPECT_EQ(info.kernels(), "cpu");
  EXPECT_EQ(info.max_num_seqs(), 7);
  EXPECT_EQ(info.speculative_config(), R"({"method":"ngram","num_speculative_tokens":2})");

  grpc::ClientContext c2;
  info_request.set_model("other");
  EXPECT_EQ(stub_->ModelInfo(&c2, info_request, &info).error_code(), grpc::StatusCode::NOT_FOUND);

  grpc::ClientContext c3;
  v1::StatsResponse stats;
  ASSERT_TRUE(stub_->Stats(&c3, v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.preemptions(), 3);
  EXPECT_DOUBLE_EQ(stats.kv_usage(), 0.25);
  EXPECT_DOUBLE_EQ(stats.prefix_cache_hit_rate(), 0.5);
  EXPECT_DOUBLE_EQ(stats.step_time().allreduce_ms(), 2);
  EXPECT_DOUBLE_EQ(stats.step_time().draft_ms(), 3);
  EXPECT_EQ(stats.spec_decode().num_drafts(), 6);
  EXPECT_EQ(stats.spec_decode().num_accepted_tokens(), 7);
  EXPECT_THAT(stats.spec_decode().accepted_per_position(), ::testing::ElementsAre(5, 2));
  EXPECT_DOUBLE_EQ(stats.spec_decode().mean_acceptance_length(), 1.0 + 7.0 / 6.0);
  // This test process's own memory, read from /proc.
  EXPECT_GT(stats.rss_bytes(), 1 << 20);
  EXPECT_GE(stats.peak_rss_bytes(), stats.rss_bytes());
  EXPECT_EQ(stats.weight_bytes(), 5678);  // the engine's, from its ModelInfo
  EXPECT_EQ(stats.load_peak_rss_bytes(), 9012);

  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest to_b = TextRequest("Hi", 1);
  to_b.set_model("alias-b");
  EXPECT_TRUE(Generate(to_b, &responses).ok());
}

// --generation-config: both APIs give the model's defaults to the fields a request leaves
// unset, keep explicit values (temperature 0 included), and ModelInfo shows the defaults.
TEST_F(FrontendTest, ModelGenerationDefaultsFillUnsetSamplingFields) {
  GenerationDefaults defaults;
  defaults.temperature = 0.6f;
  defaults.top_k = 20;
  defaults.top_p = 0.95f;
  defaults.source = "/models/m/generation_config.json";
  grpc_options_.frontend.generation_defaults = defaults;
  http_options_.frontend.generation_defaults = defaults;
  StartServers();

  std::vector<v1::GenerateResponse> responses;
  ASSERT_TRUE(Generate(TextRequest("Hi", 1), &responses).ok());
  SamplingParams seen = engine_->last_request().params;
  EXPECT_EQ(seen.temperature, 0.6f);
  EXPECT_EQ(seen.top_k, 20);
  EXPECT_EQ(seen.top_p, 0.95f);
  EXPECT_EQ(seen.min_p, 0.0f);  // no default for it: the neutral one
  v1::GenerateRequest greedy = TextRequest("Hi", 1);
  greedy.mutable_sampling()->set_temperature(0);
  greedy.mutable_sampling()->set_top_p(0.5f);
  responses.clear();
  ASSERT_TRUE(Generate(greedy, &responses).ok());
  seen = engine_->last_request().params;
  EXPECT_EQ(seen.temperature, 0.0f);
  EXPECT_EQ(seen.top_p, 0.5f);
  EXPECT_EQ(seen.top_k, 20);

  HttpResult r = Post("/v1/completions", R"({"prompt": "Hi", "max_tokens": 1, "temperature": null})");
  ASSERT_EQ(r.status, 200) << r.body;
  seen = engine_->last_request().params;
  EXPECT_EQ(seen.temperature, 0.6f);
  EXPECT_EQ(seen.top_k, 20);
  r = Post("/v1/chat/completions",
           R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0, "top_k": -1})");
  ASSERT_EQ(r.status, 200) << r.body;
  seen = engine_->last_request().params;
  EXPECT_EQ(seen.temperature, 0.0f);
  EXPECT_EQ(seen.top_k, 0);
  EXPECT_EQ(seen.top_p, 0.95f);

  grpc::ClientContext context;
  v1::ModelInfoResponse info;
  ASSERT_TRUE(stub_->ModelInfo(&context, v1::ModelInfoRequest(), &info).ok());
  const v1::DefaultSamplingParams& d = info.default_sampling_params();
  EXPECT_EQ(d.temperature(), 0.6f);
  EXPECT_EQ(d.top_k(), 20);
  EXPECT_EQ(d.top_p(), 0.95f);
  EXPECT_FALSE(d.has_min_p());
  EXPECT_FALSE(d.has_repetition_penalty());
  EXPECT_EQ(d.source(), "/models/m/generation_config.json");
  // /v1/models stays OpenAI's shape: the defaults are not added there.
  r = Get("/v1/models");
  EXPECT_EQ(r.body.find("temperature"), std::string::npos) << r.body;
}

TEST_F(FrontendTest, WithoutGenerationDefaultsUnsetFieldsAreNeutral) {
  StartServers();
  std::vector<v1::GenerateResponse> responses;
  ASSERT_TRUE(Generate(TextRequest("Hi", 1), &responses).ok());
  const SamplingParams seen = engine_->last_request().params;
  EXPECT_EQ(seen.temperature, 1.0f);
  EXPECT_EQ(seen.top_k, 0);
  EXPECT_EQ(seen.top_p, 1.0f);
  grpc::ClientContext context;
  v1::ModelInfoResponse info;
  ASSERT_TRUE(stub_->ModelInfo(&context, v1::ModelInfoRequest(), &info).ok());
  EXPECT_FALSE(info.default_sampling_params().has_temperature());
  EXPECT_EQ(info.default_sampling_params().source(), "");
}

TEST_F(FrontendTest, GrpcHealthFollowsReady) {
  StartServers();
  using grpc::health::v1::HealthCheckResponse;
  EXPECT_EQ(HealthStatus(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(HealthStatus("tpserve.v1.TpServe"), HealthCheckResponse::SERVING);
  engine_->SetReady(false);
  EXPECT_TRUE(Eventually([&] { return HealthStatus("") == HealthCheckResponse::NOT_SERVING; }));
  EXPECT_EQ(HealthStatus("tpserve.v1.TpServe"), HealthCheckResponse::NOT_SERVING);
  engine_->SetReady(true);
  EXPECT_TRUE(Eventually([&] { return HealthStatus("") == HealthCheckResponse::SERVING; }));
}

// Server reflection, as grpcurl uses it: `list` names the services, `describe` gets the
// file that defines a symbol, with no .proto on the client's side.
TEST_F(FrontendTest, GrpcServerReflectionListsAndDescribesTheServices) {
  StartServers();
  namespace reflection = tpserve::testing::reflection;
  using Stream = grpc::ClientReaderWriter<reflection::ServerReflectionRequest, reflection::ServerReflectionResponse>;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  // What a generated stub does, by the method's path (the messages' package is ours).
  const grpc::internal::RpcMethod method("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                         grpc::internal::RpcMethod::BIDI_STREAMING, channel_);
  std::unique_ptr<Stream> stream(grpc::internal::ClientReaderWriterFactory<
                                 reflection::ServerReflectionRequest,
                                 reflection::ServerReflectionResponse>::Create(channel_.get(), method, &context));
  reflection::ServerReflectionRequest list;
  list.set_list_services("");
  ASSERT_TRUE(stream->Write(list));
  reflection::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> services;
  for (const auto& s : response.list_services_response().service()) services.push_back(s.name());
  EXPECT_THAT(services, ::testing::IsSupersetOf({"tpserve.v1.TpServe", "grpc.health.v1.Health"}));

  reflection::ServerReflectionRequest describe;
  describe.set_file_containing_symbol("tpserve.v1.TpServe");
  ASSERT_TRUE(stream->Write(describe));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_GE(response.file_descriptor_response().file_descriptor_proto_size(), 1) << response.DebugString();
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(response.file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(file.package(), "tpserve.v1");
  std::vector<std::string> methods;
  for (const auto& service : file.service()) {
    for (const auto& m : service.method()) methods.push_back(m.name());
  }
  EXPECT_THAT(methods, ::testing::IsSupersetOf({"Generate", "ModelInfo", "Stats"}));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(FrontendTest, GrpcHealthStartsNotServingWhileNotReady) {
  StartServers({}, {}, /*ready=*/false);
  EXPECT_EQ(HealthStatus(""), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  std::vector<v1::GenerateResponse> responses;
  EXPECT_EQ(Generate(TextRequest("Hi", 1), &responses).error_code(), grpc::StatusCode::UNAVAILABLE);
}

// A request the server ends after admission: a drain's cut or a lost rank is UNAVAILABLE
// (retry elsewhere), an engine failure INTERNAL, each with the engine's message.
TEST_F(FrontendTest, GrpcFailureAfterAdmission) {
  StartServers(Slow());
  struct Case {
    FinishReason reason;
    const char* error;
    grpc::StatusCode code;
    absl::StatusCode error_code = absl::StatusCode::kInternal;
  };
  for (const Case& c : {Case{FinishReason::kCancelled, "the server shut down before the request finished",
                             grpc::StatusCode::UNAVAILABLE},
                        Case{FinishReason::kError, "the model step failed: rank 1 is gone", grpc::StatusCode::INTERNAL},
                        Case{FinishReason::kError, "rank 1 of 2 (host h) is gone: the job is stopping",
                             grpc::StatusCode::UNAVAILABLE, absl::StatusCode::kUnavailable}}) {
    const int before = engine_->submitted();
    std::vector<v1::GenerateResponse> responses;
    grpc::Status status;
    std::thread client([&] { status = Generate(TextRequest("Hello", 200), &responses); });
    ASSERT_TRUE(Eventually([&] { return engine_->submitted() == before + 1; }));
    engine_->EndAll(c.reason, c.error, c.error_code);
    client.join();
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_EQ(status.error_message(), c.error);
  }
}

// Generate builds its request on the render pool (not gRPC's callback thread): a full pool
// is RESOURCE_EXHAUSTED, and a call cancelled while it waits there ends CANCELLED.
TEST_F(FrontendTest, GrpcRendersOnTheBoundedPool) {
  grpc_options_.frontend.render_threads = 1;
  grpc_options_.frontend.max_pending_renders = 1;
  StartServers();
  absl::Notification gate;
  engine_->SetSubmitGate(&gate);
  grpc::Status first;
  std::vector<v1::GenerateResponse> first_responses;
  std::thread a([&] { first = Generate(TextRequest("a", 2), &first_responses); });
  ASSERT_TRUE(Eventually([&] { return engine_->submits_waiting() == 1; }));  // a holds the render thread
  // Two more: whichever arrives first waits in the queue, the other finds it full.
  grpc::ClientContext contexts[2];
  grpc::Status status[2];
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) {
    contexts[i].set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    clients.emplace_back([&, i] {
      auto reader = stub_->Generate(&contexts[i], TextRequest("b", 2));
      v1::GenerateResponse r;
      while (reader->Read(&r)) {
      }
      status[i] = reader->Finish();
      ++answered;
    });
  }
  ASSERT_TRUE(Eventually([&] { return answered.load() == 1; }));
  const int refused = status[0].error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ? 0 : 1;
  ASSERT_EQ(status[refused].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status[refused].error_message();
  EXPECT_THAT(status[refused].error_message(), ::testing::HasSubstr("--max-pending-renders"));
  contexts[1 - refused].TryCancel();  // the queued one, while it waits to be built
  engine_->SetSubmitGate(nullptr);
  gate.Notify();
  a.join();
  for (std::thread& t : clients) t.join();
  EXPECT_TRUE(first.ok()) << first.error_message();
  // The cancel reaches the server while the call waits in the pool (CANCELLED, never
  // submitted) or, if the pool got to it first, while it runs (CANCELLED) or after its two
  // tokens (OK): never an error of the server's.
  const grpc::StatusCode queued = status[1 - refused].error_code();
  EXPECT_TRUE(queued == grpc::StatusCode::CANCELLED || queued == grpc::StatusCode::OK) << queued;
  EXPECT_LE(engine_->submitted(), 2);
}

TEST_F(FrontendTest, ShutdownWithOpenStreamsCancelsThem) {
  StartServers(Slow());
  std::thread grpc_client([&] {
    std::vector<v1::GenerateResponse> responses;
    Generate(TextRequest("Hello", 200), &responses);
  });
  std::thread http_client([&] { Post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 200})"); });
  ASSERT_TRUE(Eventually([&] { return engine_->submitted() == 2; }));
  http_->Shutdown();
  grpc_->Shutdown();
  EXPECT_TRUE(engine_->WaitForCancelled(2, absl::Seconds(10)));
  grpc_client.join();
  http_client.join();
}

TEST_F(FrontendTest, ClientCommandTalksToBothServers) {
  StartServers();
  for (bool chat : {false, true}) {
    for (bool grpc : {true, false}) {
      ClientCommandOptions o;
      if (grpc) {
        o.grpc_target = absl::StrCat("127.0.0.1:", grpc_->port());
      } else {
        o.http_url = absl::StrCat("http://127.0.0.1:", http_->port(), "/v1");
      }
      o.prompt = "Hello world";
      o.chat = chat;
      o.max_tokens = 5;
      o.temperature = 0;
      std::ostringstream streamed;
      absl::StatusOr<ClientResult> r = RunClientRequest(o, streamed);
      ASSERT_TRUE(r.ok()) << r.status() << " grpc=" << grpc << " chat=" << chat;
      EXPECT_EQ(streamed.str(), r->text);
      EXPECT_EQ(r->completion_tokens, 5);
      EXPECT_EQ(r->finish_reason, "length");
      EXPECT_GT(r->ttft_ms, 0);
      EXPECT_GE(r->total_ms, r->ttft_ms);
      EXPECT_EQ(engine_->last_request().params.temperature, 0);
      if (!chat) {
        std::vector<int32_t> prompt = tokenizer_->Encode("Hello world", true);
        std::vector<int32_t> echoed;
        for (int i = 0; i < 5; ++i) echoed.push_back(prompt[i % prompt.size()]);
        EXPECT_EQ(r->text, tokenizer_->Decode(echoed, true));
      }
    }
  }
  ClientCommandOptions bad;
  bad.prompt = "x";
  EXPECT_EQ(RunClientRequest(bad, std::cout).status().code(), absl::StatusCode::kInvalidArgument);
  ClientCommandOptions unknown;
  unknown.http_url = absl::StrCat("http://127.0.0.1:", http_->port());
  unknown.prompt = "x";
  unknown.model = "nope";
  absl::StatusOr<ClientResult> r = RunClientRequest(unknown, std::cout);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("HTTP 404"));
}

// ---- RequestBuilder: bounded work before admission ----

// `n` alternating user/assistant messages of ~35 bytes of JSON each (issue 16: 10,000 of
// them, 350 KB).
nlohmann::ordered_json ShortMessages(int n) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (int i = 0; i < n; ++i) {
    messages.push_back({{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", absl::StrCat(i)}});
  }
  return messages;
}

GenerateInput ChatInput(nlohmann::ordered_json messages) {
  GenerateInput input;
  ChatPrompt chat;
  chat.messages = std::move(messages);
  input.prompt = std::move(chat);
  return input;
}

void ExpectRefused(const absl::StatusOr<ServeRequest>& r, const std::string& field, const std::string& message_part) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorField(r.status()), field);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(message_part));
}

// Build applies a request's tools: rendered for "auto" (special tokens kept in the text),
// a JSON schema for "required" and a named function; errors name the field.
TEST_F(FrontendTest, BuilderAppliesToolUse) {
  FakeEngineOptions options;
  options.max_model_len = 8192;
  FakeEngine engine(*tokenizer_, options);
  RequestBuilder hermes(engine, *tokenizer_, chat_template_.get(), {}, {}, ToolCallFormat::kHermes);
  RequestBuilder none(engine, *tokenizer_, chat_template_.get(), {}, {}, ToolCallFormat::kNone);
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name":
      "get", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  auto input = [&](const char* choice) {
    GenerateInput in;
    ChatPrompt chat;
    chat.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Weather?"}])");
    in.prompt = chat;
    in.params.max_tokens = 8;
    in.max_tokens_set = true;
    in.tool_use = *ParseToolUse(tools, choice == nullptr ? nlohmann::ordered_json() : nlohmann::ordered_json(choice));
    return in;
  };
  auto automatic = hermes.Build(input(nullptr), "t-");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_FALSE(automatic->params.skip_special_tokens);
  EXPECT_EQ(automatic->params.grammar, nullptr);
  auto plain = hermes.Build(input("none"), "t-");
  ASSERT_TRUE(plain.ok());
  EXPECT_LT(plain->prompt_ids.size(), automatic->prompt_ids.size());  // the tools were rendered
  auto required = hermes.Build(input("required"), "t-");
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_NE(required->params.grammar, nullptr);
  auto refused = none.Build(input("auto"), "t-");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("--tool-call-parser"));
  EXPECT_TRUE(none.Build(input("required"), "t-").ok());  // constrained: no syntax needed
  GenerateInput text = input(nullptr);
  text.prompt = std::string("Weather?");
  EXPECT_THAT(hermes.Build(text, "t-").status().message(), HasSubstr("chat prompt"));
}

TEST_F(FrontendTest, BuilderRefusesTooManyMessagesBeforeRendering) {
  FakeEngineOptions options;
  options.max_model_len = 8192;
  FakeEngine engine(*tokenizer_, options);
  RequestBuilder builder(engine, *tokenizer_, chat_template_.get(), {});
  GenerateInput input = ChatInput(ShortMessages(10000));
  EXPECT_GT(std::get<ChatPrompt>(input.prompt).messages.dump().size(), 350000u);
  ExpectRefused(builder.Build(input, "t-"), "messages", "messages: 10000 messages cannot fit in max_model_len 8192");
}

TEST_F(FrontendTest, BuilderRefusesTooMuchTextBeforeRenderingOrTokenizing) {
  FakeEngineOptions options;
  options.max_model_len = 64;
  FakeEngine engine(*tokenizer_, options);
  RequestBuilder builder(engine, *tokenizer_, chat_template_.get(), {});
  const int64_t max_bytes = 64 * *tokenizer_->max_text_bytes_per_token();
  // Whitespace does not count (templates may trim it), so this one reaches the token check.
  nlohmann::ordered_json spaced = ShortMessages(1);
  spaced[0]["content"] = std::string(max_bytes + 1, ' ') + "x";
  ExpectRefused(builder.Build(ChatInput(spaced), "t-"), "messages", "tokens, but max_model_len is 64");
  nlohmann::ordered_json long_text = ShortMessages(2);
  long_text[1]["content"] = {{{"type", "text"}, {"text", std::string(max_bytes / 2, 'x')}}};
  long_text[0]["content"] = std::string(max_bytes / 2 + 1, 'y');
  ExpectRefused(builder.Build(ChatInput(long_text), "t-"), "messages",
                absl::StrCat("messages: the message contents hold ", max_bytes + 1, " bytes of text"));
  GenerateInput text;
  text.prompt = std::string(max_bytes + 1, 'z');
  ExpectRefused(builder.Build(text, "t-"), "prompt", absl::StrCat("prompt: ", max_bytes + 1, " bytes of text"));
  // Reasoning before an assistant's "</think>" does not count: templates drop it from history.
  nlohmann::ordered_json reasoning = ShortMessages(3);
  reasoning[1]["content"] = "<think>" + std::string(max_bytes, 'r') + "</think>ok";
  ExpectRefused(builder.Build(ChatInput(reasoning), "t-"), "messages", "tokens, but max_model_len is 64");
}

// The bounds refuse nothing that fits: a chat whose rendering is T tokens is built at
// max_model_len T + 1 (and refused, by the exact token check, at T).
TEST_F(FrontendTest, BuilderAcceptsAChatThatExactlyFits) {
  const nlohmann::ordered_json messages = ShortMessages(40);
  ApplyChatTemplateOptions apply;
  apply.add_generation_prompt = true;
  auto text = chat_template_->Apply(messages, apply);
  ASSERT_TRUE(text.ok()) << text.status();
  const int64_t tokens = static_cast<int64_t>(tokenizer_->Encode(*text, false).size());
  for (const int64_t max_model_len : {tokens + 1, tokens}) {
    FakeEngineOptions options;
    options.max_model_len = max_model_len;
    FakeEngine engine(*tokenizer_, options);
    RequestBuilder builder(engine, *tokenizer_, chat_template_.get(), {});
    absl::StatusOr<ServeRequest> request = builder.Build(ChatInput(messages), "t-");
    if (max_model_len > tokens) {
      ASSERT_TRUE(request.ok()) << request.status();
      EXPECT_EQ(static_cast<int64_t>(request->prompt_ids.size()), tokens);
    } else {
      ExpectRefused(request, "messages", absl::StrCat("messages is ", tokens, " tokens, but max_model_len is "));
    }
  }
}

}  // namespace
}  // namespace tpserve
