// The router's own gRPC port (router_grpc_server.h), in one process: a fake engine behind serve's
// gRPC server (tests/frontend_fixture.h), the router in front. A streamed Generate through the
// router gives the backend's own messages; a dead replica is failed over; an unknown model is
// NOT_FOUND naming the available ones; the router's key is checked; a client's cancel cancels the
// backend's request; a client's deadline goes on to the backend's call and ends it (a stalling
// fake backend), and so does the router's request_timeout_s, before or after the first message;
// a grpc:// backend's timeout_s ends its call;
// a busy backend, failures after the first message; a model whose backend is
// serve's HTTP port (the same answers as its gRPC port, what it cannot answer refused or sent to
// a grpc:// backend, failover, refusals, failures, a cancel and a deadline); ModelInfo, Stats
// (the router's own numbers), health, shutdown with a call open, the request log and the metrics
// (counted under door="grpc"; the tokens and cost of a known request; ModelInfo calls). Real
// processes: tests/router_grpc_front_test.sh.
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/api/grpc_server_start.h"
#include "coordinator/router/grpc_front_generate.h"
#include "coordinator/router/router_server.h"
#include "gmock/gmock.h"
#include "tests/frontend_fixture.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

// A loopback port nothing listens on (bound, then closed).
int DeadPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A loopback port that takes connections (the kernel's backlog) and never answers; closed with
// the object.
class SilentPort {
 public:
  SilentPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentPort() { ::close(fd_); }
  int port() const { return port_; }

 private:
  const int fd_;
  int port_ = 0;
};

// A text prompt, a chat with two choices (with logprobs where asked) and a token-id prompt with a
// stop token: the three kinds of Generate request.
std::vector<v1::GenerateRequest> ThreePrompts(bool logprobs) {
  std::vector<v1::GenerateRequest> requests;
  requests.push_back(TextRequest("Hello world, this is a test", 12));
  v1::GenerateRequest chat;
  v1::ChatMessage* m = chat.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Hi there");
  chat.mutable_sampling()->set_max_tokens(6);
  if (logprobs) chat.mutable_sampling()->set_logprobs(1);
  chat.set_n(2);
  requests.push_back(chat);
  v1::GenerateRequest ids;
  for (int id : {11, 12, 13, 14}) ids.mutable_token_ids()->add_ids(id);
  ids.mutable_sampling()->set_max_tokens(8);
  ids.mutable_sampling()->add_stop_token_ids(13);
  requests.push_back(ids);
  return requests;
}

// A message as the client compares it: without what differs between two runs of a request.
v1::GenerateResponse Comparable(v1::GenerateResponse r) {
  r.clear_request_id();
  r.clear_timings();
  return r;
}

// A backend whose Generate sends nothing until its call is cancelled (the client's cancel, or its
// deadline); it keeps the deadline each call arrived with and counts the cancellations.
class StallingBackend : public v1::TpServe::CallbackService {
 public:
  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* context,
                                                           const v1::GenerateRequest* request) override {
    absl::MutexLock lock(&mu_);
    deadlines_.push_back(context->deadline());
    return new Stall(this);
  }

  size_t calls() {
    absl::MutexLock lock(&mu_);
    return deadlines_.size();
  }
  std::chrono::system_clock::time_point deadline(size_t call) {
    absl::MutexLock lock(&mu_);
    return deadlines_.at(call);
  }
  int cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

 private:
  class Stall : public grpc::ServerWriteReactor<v1::GenerateResponse> {
   public:
    explicit Stall(StallingBackend* backend) : backend_(backend) {}
    void OnCancel() override {
      {
        absl::MutexLock lock(&backend_->mu_);
        ++backend_->cancelled_;
      }
      Finish(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    StallingBackend* const backend_;
  };

  absl::Mutex mu_;
  std::vector<std::chrono::system_clock::time_point> deadlines_ ABSL_GUARDED_BY(mu_);
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
};

// `stalling` served on a free loopback port.
absl::StatusOr<StartedGrpcServer> ServeOnLoopback(StallingBackend& stalling) {
  GrpcListenOptions listen;
  listen.address = "127.0.0.1:0";
  return StartGrpcServer("stalling backend", listen, stalling);
}

class RouterGrpcFrontTest : public FrontendTest {
 protected:
  // A 200-token streamed Generate through the router, cancelled by the client after three
  // messages: CANCELLED.
  void CancelAfterThreeMessages() {
    grpc::ClientContext context;
    v1::GenerateRequest request = TextRequest("Hi", 200);
    request.mutable_sampling()->set_ignore_eos(true);
    auto reader = router_stub_->Generate(&context, request);
    v1::GenerateResponse r;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(reader->Read(&r));
    context.TryCancel();
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // A 200-token streamed Generate to `model` (empty: the router's only one) whose engine request
  // fails with `code` and `error` after the first message: the call's status.
  grpc::Status FailAfterFirstMessage(const std::string& model, absl::StatusCode code, const std::string& error) {
    grpc::ClientContext context;
    v1::GenerateRequest request = TextRequest("Hi", 200);
    if (!model.empty()) request.set_model(model);
    request.mutable_sampling()->set_ignore_eos(true);
    auto reader = router_stub_->Generate(&context, request);
    v1::GenerateResponse r;
    EXPECT_TRUE(reader->Read(&r));
    engine_->EndAll(FinishReason::kError, error, code);
    while (reader->Read(&r)) {
    }
    return reader->Finish();
  }
  void TearDown() override {
    router_.reset();
    std::remove(log_path_.c_str());
    FrontendTest::TearDown();
  }

  // A router with a gRPC port, serving `models_json` (the config's "models" object; $G stands
  // for the fake backend's gRPC URL).
  void StartRouter(std::string models_json, std::vector<std::string> api_keys = {}) {
    const std::string g = absl::StrCat("grpc://127.0.0.1:", grpc_->port());
    for (size_t at; (at = models_json.find("$G")) != std::string::npos;) models_json.replace(at, 2, g);
    absl::StatusOr<RouterConfig> config = ParseRouterConfig(absl::StrCat(R"({"models": )", models_json, "}"));
    ASSERT_TRUE(config.ok()) << config.status();
    RouterOptions options;
    options.transport.host = "127.0.0.1";
    options.transport.port = 0;
    options.grpc_port = 0;
    options.api_keys = std::move(api_keys);
    options.request_log = log_path_;
    router_ = std::make_unique<RouterServer>(*std::move(config), options);
    ASSERT_TRUE(router_->Start().ok());
    ASSERT_GT(router_->grpc_port(), 0);
    router_channel_ =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", router_->grpc_port()), grpc::InsecureChannelCredentials());
    router_stub_ = v1::TpServe::NewStub(router_channel_);
  }

  // The default router: model "relayed" on the fake backend (its model "fake-model").
  void StartRelayRouter(std::vector<std::string> api_keys = {}) {
    StartRouter(R"({"relayed": {"backends": [{"url": "$G", "model": "fake-model"}]}})", std::move(api_keys));
  }

  // A Generate call through the router, to its end; `key` goes as the authorization metadata;
  // `backend` gets the x-tpserve-backend initial metadata.
  grpc::Status RouterGenerate(const v1::GenerateRequest& request, std::vector<v1::GenerateResponse>* responses,
                              const std::string& key = "", std::string* backend = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!key.empty()) context.AddMetadata("authorization", "Bearer " + key);
    auto reader = router_stub_->Generate(&context, request);
    v1::GenerateResponse r;
    while (reader->Read(&r)) responses->push_back(r);
    grpc::Status status = reader->Finish();
    if (backend != nullptr) {
      const auto& metadata = context.GetServerInitialMetadata();
      auto it = metadata.find("x-tpserve-backend");
      *backend = it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
    }
    return status;
  }

  std::string Metrics() {
    httplib::Client client("127.0.0.1", router_->port());
    auto res = client.Get("/metrics");
    return res ? res->body : "";
  }

  std::vector<std::string> LogLines() {
    std::ifstream in(log_path_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::string BackendUrl() const { return absl::StrCat("grpc://127.0.0.1:", grpc_->port()); }

  const std::string log_path_ = absl::StrCat(::testing::TempDir(), "/router_grpc_front_test_", getpid(), ".jsonl");
  std::unique_ptr<RouterServer> router_;
  std::shared_ptr<grpc::Channel> router_channel_;
  std::unique_ptr<v1::TpServe::Stub> router_stub_;
};

TEST_F(RouterGrpcFrontTest, StreamedGenerateEqualsStraightToTheBackend) {
  StartServers();
  StartRelayRouter();
  const std::vector<v1::GenerateRequest> requests = ThreePrompts(/*logprobs=*/true);
  for (v1::GenerateRequest request : requests) {
    SCOPED_TRACE(request.ShortDebugString());
    std::vector<v1::GenerateResponse> relayed, direct;
    request.set_model("relayed");
    std::string backend;
    ASSERT_TRUE(RouterGenerate(request, &relayed, "", &backend).ok());
    EXPECT_EQ(backend, BackendUrl());
    request.set_model("fake-model");
    ASSERT_TRUE(Generate(request, &direct).ok());
    ASSERT_FALSE(relayed.empty());
    // The same tokens, text, logprobs and finish per choice (how they split into messages may
    // differ between two runs).
    auto fold = [](const std::vector<v1::GenerateResponse>& messages) {
      std::map<int, v1::GenerateResponse> by_choice;
      for (const v1::GenerateResponse& r : messages) {
        v1::GenerateResponse& f = by_choice[r.index()];
        f.set_index(r.index());
        f.mutable_token_ids()->MergeFrom(r.token_ids());
        f.mutable_text()->append(r.text());
        f.mutable_logprobs()->MergeFrom(r.logprobs());
        f.mutable_usage()->CopyFrom(r.usage());
        if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) f.set_finish_reason(r.finish_reason());
        if (r.has_stop_token_id()) f.set_stop_token_id(r.stop_token_id());
      }
      std::vector<std::string> out;
      for (auto& [index, f] : by_choice) out.push_back(Comparable(f).ShortDebugString());
      return out;
    };
    EXPECT_EQ(fold(relayed), fold(direct));
    EXPECT_NE(relayed.back().finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  }
  // The router's only model is the default one (proto3's empty model); the backend got its name
  // for it (it refuses any other).
  std::vector<v1::GenerateResponse> responses;
  EXPECT_TRUE(RouterGenerate(TextRequest("Hi", 2), &responses).ok());
  // The request log and the metrics count gRPC calls as HTTP requests.
  const std::vector<std::string> lines = LogLines();
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_THAT(lines[0], HasSubstr(absl::StrCat(R"("model":"relayed","backend":")", BackendUrl(), R"(")")));
  EXPECT_THAT(lines[0], HasSubstr(R"("status":200,"success":true,"error":null,"prompt_tokens":)"));
  EXPECT_THAT(lines[0], HasSubstr(R"("grpc_status":"OK")"));
  const std::string labels = absl::StrCat("model=\"relayed\",backend=\"", BackendUrl(), "\"");
  EXPECT_THAT(Metrics(), HasSubstr(absl::StrCat("tpserve_router_backend_requests_total{", labels, "} 4")));
  EXPECT_THAT(Metrics(),
              HasSubstr("tpserve_router_requests_total{model=\"relayed\",door=\"grpc\",outcome=\"success\"} 4"));
  EXPECT_THAT(Metrics(),
              HasSubstr("tpserve_router_requests_total{model=\"relayed\",door=\"http\",outcome=\"success\"} 0"));
}

// A known request through the gRPC port: its tokens (the backend's usage) and their cost at the
// backend's prices in /metrics and the log line; ModelInfo calls counted by outcome.
TEST_F(RouterGrpcFrontTest, TokensCostAndModelInfoAreCounted) {
  StartServers();
  StartRouter(R"({"relayed": {"backends": [{"url": "$G", "model": "fake-model",
                                             "price_per_mtok": {"input": 2, "output": 10}}]}})");
  v1::GenerateRequest request = TextRequest("Hello world, this is a test", 12);
  request.set_n(2);
  std::vector<v1::GenerateResponse> responses;
  ASSERT_TRUE(RouterGenerate(request, &responses).ok());
  // The backend's own count: the prompt's, and each choice's last completion count, summed.
  int64_t prompt = 0;
  std::map<int, int64_t> completion_by_choice;
  for (const v1::GenerateResponse& r : responses) {
    prompt = std::max<int64_t>(prompt, r.usage().prompt_tokens());
    completion_by_choice[r.index()] = r.usage().completion_tokens();
  }
  int64_t completion = 0;
  for (const auto& [index, tokens] : completion_by_choice) completion += tokens;
  ASSERT_GT(prompt, 0);
  ASSERT_EQ(completion_by_choice.size(), 2u);
  ASSERT_GT(completion, 0);
  const std::string labels = absl::StrCat("model=\"relayed\",backend=\"", BackendUrl(), "\"");
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_prompt_tokens_total{", labels, "} ", prompt)));
  EXPECT_THAT(metrics,
              HasSubstr(absl::StrCat("tpserve_router_backend_completion_tokens_total{", labels, "} ", completion)));
  const std::string cost_series = absl::StrCat("tpserve_router_backend_cost_usd_total{", labels, "} ");
  const size_t at = metrics.find(cost_series);
  ASSERT_NE(at, std::string::npos) << metrics;
  EXPECT_DOUBLE_EQ(std::stod(metrics.substr(at + cost_series.size())), (prompt * 2.0 + completion * 10.0) / 1e6);
  const std::vector<std::string> lines = LogLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr(absl::StrCat(R"("prompt_tokens":)", prompt, R"(,"completion_tokens":)", completion)));
  EXPECT_THAT(lines[0], HasSubstr(R"("cost_usd":)"));

  grpc::ClientContext info_context;
  v1::ModelInfoRequest info_request;
  info_request.set_model("relayed");
  v1::ModelInfoResponse info;
  ASSERT_TRUE(router_stub_->ModelInfo(&info_context, info_request, &info).ok());
  grpc::ClientContext unknown_context;
  info_request.set_model("nope");
  EXPECT_EQ(router_stub_->ModelInfo(&unknown_context, info_request, &info).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(Metrics(), HasSubstr("tpserve_router_grpc_model_info_total{outcome=\"success\"} 1"));
  EXPECT_THAT(Metrics(), HasSubstr("tpserve_router_grpc_model_info_total{outcome=\"error\"} 1"));
}

TEST_F(RouterGrpcFrontTest, ADeadReplicaIsFailedOver) {
  StartServers();
  const std::string dead = absl::StrCat("grpc://127.0.0.1:", DeadPort());
  StartRouter(absl::StrCat(R"({"m": {"policy": "round_robin", "backends": [")", dead,
                           R"(", {"url": "$G", "model": "fake-model"}]}})"));
  for (int i = 0; i < 2; ++i) {  // one of the two starts at the dead replica
    std::vector<v1::GenerateResponse> responses;
    v1::GenerateRequest request = TextRequest("Hello", 3);
    request.set_model("m");
    std::string backend;
    const grpc::Status s = RouterGenerate(request, &responses, "", &backend);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(backend, BackendUrl());
  }
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{model=\"m\",backend=\"", dead,
                                              "\",kind=\"connect\"} 1")));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_healthy{model=\"m\",backend=\"", dead, "\"} 0")));
  // Alone, the dead replica is UNAVAILABLE naming it.
  router_.reset();
  StartRouter(absl::StrCat(R"({"m": {"backends": [")", dead, R"("]}})"));
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest request = TextRequest("Hello", 3);
  request.set_model("m");
  const grpc::Status s = RouterGenerate(request, &responses);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("every backend of model \"m\" (and its fallbacks) failed: ",
                                                        dead, ": gRPC UNAVAILABLE")));
}

TEST_F(RouterGrpcFrontTest, UnknownAndMissingModels) {
  StartServers();
  StartRouter(R"({"a": {"backends": ["$G"]}, "b": {"backends": ["$G"]}})");
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest request = TextRequest("Hello", 3);
  request.set_model("nope");
  grpc::Status s = RouterGenerate(request, &responses);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "The model `nope` does not exist. Available models: a, b");
  request.clear_model();
  s = RouterGenerate(request, &responses);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "'model' is required: the router serves a, b");
  EXPECT_TRUE(responses.empty());
  EXPECT_EQ(engine_->submitted(), 0);
  // Logged as the HTTP side logs its refusals.
  const std::vector<std::string> lines = LogLines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], HasSubstr(R"("model":"nope","backend":null)"));
  EXPECT_THAT(lines[0], HasSubstr(R"("status":404,"success":false)"));
  EXPECT_THAT(lines[0], HasSubstr(R"("grpc_status":"NOT_FOUND")"));
}

TEST_F(RouterGrpcFrontTest, TheRoutersKeyIsCheckedOnEveryMethod) {
  StartServers();
  StartRelayRouter({"router-secret"});
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest request = TextRequest("Hello", 3);
  EXPECT_EQ(RouterGenerate(request, &responses).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RouterGenerate(request, &responses, "wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(engine_->submitted(), 0);
  EXPECT_TRUE(RouterGenerate(request, &responses, "router-secret").ok());
  {
    grpc::ClientContext context;
    v1::ModelInfoRequest info_request;
    v1::ModelInfoResponse info;
    EXPECT_EQ(router_stub_->ModelInfo(&context, info_request, &info).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer router-secret");
    v1::StatsRequest stats_request;
    v1::StatsResponse stats;
    EXPECT_TRUE(router_stub_->Stats(&context, stats_request, &stats).ok());
  }
  {
    grpc::ClientContext context;
    v1::StatsRequest stats_request;
    v1::StatsResponse stats;
    EXPECT_EQ(router_stub_->Stats(&context, stats_request, &stats).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
}

TEST_F(RouterGrpcFrontTest, ModelInfoComesFromABackendUnderTheRoutersName) {
  StartServers();
  StartRouter(R"({"relayed": {"backends": [{"url": "$G", "model": "fake-model"}]}, "other": {"backends": ["$G"]}})");
  grpc::ClientContext context;
  v1::ModelInfoRequest request;
  request.set_model("relayed");
  v1::ModelInfoResponse info;
  ASSERT_TRUE(router_stub_->ModelInfo(&context, request, &info).ok());
  EXPECT_EQ(info.max_model_len(), 256);
  ASSERT_EQ(info.served_model_names_size(), 1);
  EXPECT_EQ(info.served_model_names(0), "relayed");
  // The backend's refusal passes through: it serves no model "other".
  grpc::ClientContext other_context;
  request.set_model("other");
  EXPECT_EQ(router_stub_->ModelInfo(&other_context, request, &info).error_code(), grpc::StatusCode::NOT_FOUND);
  // No model, several: the names.
  grpc::ClientContext names_context;
  request.clear_model();
  v1::ModelInfoResponse names;
  ASSERT_TRUE(router_stub_->ModelInfo(&names_context, request, &names).ok());
  EXPECT_THAT(names.served_model_names(), ::testing::ElementsAre("other", "relayed"));
  grpc::ClientContext unknown_context;
  request.set_model("nope");
  EXPECT_EQ(router_stub_->ModelInfo(&unknown_context, request, &info).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(RouterGrpcFrontTest, AClientsCancelCancelsTheBackendsRequest) {
  StartServers(Slow());
  StartRelayRouter();
  CancelAfterThreeMessages();
  EXPECT_TRUE(engine_->WaitForCancelled(1, absl::Seconds(10)));
  EXPECT_TRUE(Eventually([this] { return engine_->running() == 0; }));
  EXPECT_TRUE(Eventually([this] {
    const std::vector<std::string> lines = LogLines();
    return lines.size() == 1 && lines[0].find(R"("status":499,"success":false)") != std::string::npos &&
           lines[0].find(R"("grpc_status":"CANCELLED")") != std::string::npos;
  }));
  EXPECT_THAT(Metrics(),
              HasSubstr("tpserve_router_requests_total{model=\"relayed\",door=\"grpc\",outcome=\"client_gone\"} 1"));
}

TEST_F(RouterGrpcFrontTest, TheClientsDeadlineGoesToTheBackendAndEndsItsCall) {
  StartServers();
  StallingBackend stalling;
  absl::StatusOr<StartedGrpcServer> backend = ServeOnLoopback(stalling);
  ASSERT_TRUE(backend.ok()) << backend.status();
  StartRouter(absl::StrCat(R"({"stalled": {"backends": ["grpc://127.0.0.1:)", backend->port, R"("]}})"));
  const auto start = std::chrono::system_clock::now();
  const auto deadline = start + std::chrono::seconds(1);
  {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    auto reader = router_stub_->Generate(&context, TextRequest("Hi", 5));
    v1::GenerateResponse r;
    EXPECT_FALSE(reader->Read(&r));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  EXPECT_LT(std::chrono::system_clock::now() - start, std::chrono::seconds(3));
  // The backend's call carried what was left of the client's deadline (gRPC sends it as a
  // timeout, rounded up) ...
  ASSERT_EQ(stalling.calls(), 1u);
  const auto off = stalling.deadline(0) - deadline;
  EXPECT_LT(off, std::chrono::milliseconds(200));
  EXPECT_GT(off, std::chrono::milliseconds(-200));
  // ... and was cancelled when it passed.
  EXPECT_TRUE(Eventually([&] { return stalling.cancelled() == 1; }));
  // The client's doing: logged as its deadline, the backend neither failed nor ejected.
  EXPECT_TRUE(Eventually([this] {
    const std::vector<std::string> lines = LogLines();
    return lines.size() == 1 && lines[0].find(R"("status":499,"success":false)") != std::string::npos &&
           lines[0].find(R"("grpc_status":"DEADLINE_EXCEEDED")") != std::string::npos &&
           lines[0].find("the client's deadline") != std::string::npos;
  })) << (LogLines().empty() ? "" : LogLines()[0]);
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("tpserve_router_requests_total{model=\"stalled\",door=\"grpc\",outcome=\"client_gone\"} 1"));
  const std::string labels = absl::StrCat("model=\"stalled\",backend=\"grpc://127.0.0.1:", backend->port, "\"");
  for (const char* kind : {"connect", "timeout", "stream_broken"}) {
    EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{", labels, ",kind=\"", kind,
                                                "\"} 0")));
  }
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_healthy{", labels, "} 1")));
  StopGrpcServer(*backend->server, absl::ZeroDuration());
}

// A grpc:// backend's own timeouts, kept by its call (grpc_generate_call.cc): a backend that
// never answers is given up after its timeout_s counted from the call's start (connect_timeout_s
// spent connecting, the rest waiting for the first message), UNAVAILABLE naming its timeout_s,
// counted as a timeout (its channel came up: not a failure to connect), and ejected.
TEST_F(RouterGrpcFrontTest, AGrpcBackendsTimeoutEndsItsCall) {
  StartServers();
  StallingBackend stalling;
  absl::StatusOr<StartedGrpcServer> backend = ServeOnLoopback(stalling);
  ASSERT_TRUE(backend.ok()) << backend.status();
  const std::string url = absl::StrCat("grpc://127.0.0.1:", backend->port);
  StartRouter(absl::StrCat(R"({"stalled": {"backends": [{"url": ")", url,
                           R"(", "connect_timeout_s": 0.5, "timeout_s": 1.5}]}})"));
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest request = TextRequest("Hi", 5);
  request.set_model("stalled");
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status s = RouterGenerate(request, &responses);  // the client's deadline: 60 s
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(),
              HasSubstr(absl::StrCat("every backend of model \"stalled\" (and its fallbacks) failed: ", url,
                                     ": gRPC DEADLINE_EXCEEDED: no response from 127.0.0.1:", backend->port,
                                     " within 1.5s")));
  EXPECT_TRUE(responses.empty());
  EXPECT_GT(took, std::chrono::milliseconds(1400));
  EXPECT_LT(took, std::chrono::milliseconds(3500));
  EXPECT_TRUE(Eventually([&] { return stalling.cancelled() == 1; }));
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_healthy{model=\"stalled\",backend=\"", url,
                                              "\"} 0")));
  // Connected (the channel came up), then silent: a timeout, not a failure to connect.
  const std::string labels = absl::StrCat("model=\"stalled\",backend=\"", url, "\"");
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{", labels, ",kind=\"timeout\"} 1")));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{", labels, ",kind=\"connect\"} 0")));
  StopGrpcServer(*backend->server, absl::ZeroDuration());
}

// request_timeout_s on the gRPC port: the router's bound goes to the backend's call as its
// deadline (before the client's); when it passes the client gets DEADLINE_EXCEEDED naming it,
// before or after the first message, the backend's call is cancelled, and the backend is counted
// as timed out but stays in routing.
TEST_F(RouterGrpcFrontTest, TheRequestTimeoutEndsTheCallBeforeAndAfterTheFirstMessage) {
  StartServers(Slow());
  StallingBackend stalling;
  absl::StatusOr<StartedGrpcServer> backend = ServeOnLoopback(stalling);
  ASSERT_TRUE(backend.ok()) << backend.status();
  StartRouter(absl::StrCat(R"({"stalled": {"request_timeout_s": 1, "backends": ["grpc://127.0.0.1:)", backend->port,
                           R"("]}, "relayed": {"request_timeout_s": 1, "backends": [{"url": "$G", "model": "fake-model"}]}})"));
  const auto start = std::chrono::system_clock::now();
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest stalled = TextRequest("Hi", 5);
  stalled.set_model("stalled");
  grpc::Status s = RouterGenerate(stalled, &responses);  // the client's deadline: 60 s
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("the request passed its request_timeout_s (1s from its arrival "
                                                        "at the router) before the backend grpc://127.0.0.1:",
                                                        backend->port, " answered")));
  EXPECT_TRUE(responses.empty());
  EXPECT_LT(std::chrono::system_clock::now() - start, std::chrono::seconds(5));
  ASSERT_EQ(stalling.calls(), 1u);
  const auto off = stalling.deadline(0) - (start + std::chrono::seconds(1));
  EXPECT_LT(off, std::chrono::milliseconds(300));
  EXPECT_GT(off, std::chrono::milliseconds(-300));
  EXPECT_TRUE(Eventually([&] { return stalling.cancelled() == 1; }));

  // After the first message: a 200-token stream at 20 ms a token outlasts the second.
  v1::GenerateRequest request = TextRequest("Hi", 200);
  request.mutable_sampling()->set_ignore_eos(true);
  request.set_model("relayed");
  responses.clear();
  s = RouterGenerate(request, &responses);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("request_timeout_s (1s from its arrival at the router) while the "
                                                        "backend ", BackendUrl(), " was streaming")));
  EXPECT_FALSE(responses.empty());
  EXPECT_TRUE(engine_->WaitForCancelled(1, absl::Seconds(10)));

  const std::string metrics = Metrics();
  for (const std::string& labels : {absl::StrCat("model=\"stalled\",backend=\"grpc://127.0.0.1:", backend->port, "\""),
                                   absl::StrCat("model=\"relayed\",backend=\"", BackendUrl(), "\"")}) {
    EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{", labels, ",kind=\"timeout\"} 1")));
    EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_healthy{", labels, "} 1")));
  }
  EXPECT_THAT(metrics, HasSubstr("tpserve_router_requests_total{model=\"relayed\",door=\"grpc\",outcome=\"error\"} 1"));
  EXPECT_TRUE(Eventually([this] {
    const std::vector<std::string> lines = LogLines();
    return lines.size() == 2 && lines[1].find(R"("grpc_status":"DEADLINE_EXCEEDED")") != std::string::npos &&
           lines[1].find("request_timeout_s") != std::string::npos;
  }));
  StopGrpcServer(*backend->server, absl::ZeroDuration());
}

TEST_F(RouterGrpcFrontTest, ShutdownEndsOpenCallsAndTheirBackendCalls) {
  StartServers(Slow());
  StartRelayRouter();
  grpc::ClientContext context;
  v1::GenerateRequest request = TextRequest("Hi", 200);
  request.mutable_sampling()->set_ignore_eos(true);
  auto reader = router_stub_->Generate(&context, request);
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));
  router_->Shutdown();  // returns once the call ended
  while (reader->Read(&r)) {
  }
  EXPECT_FALSE(reader->Finish().ok());
  EXPECT_TRUE(engine_->WaitForCancelled(1, absl::Seconds(10)));
}

TEST_F(RouterGrpcFrontTest, ABusyBackendIsResourceExhaustedNotEjected) {
  StartServers();
  StartRelayRouter();
  engine_->SetSubmitError(absl::ResourceExhaustedError("the queue is full"));
  std::vector<v1::GenerateResponse> responses;
  const grpc::Status s = RouterGenerate(TextRequest("Hi", 2), &responses);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("is over its queue limit"));
  const std::string labels = absl::StrCat("model=\"relayed\",backend=\"", BackendUrl(), "\"");
  EXPECT_THAT(Metrics(), HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{", labels, ",kind=\"busy\"} 1")));
  EXPECT_THAT(Metrics(), HasSubstr(absl::StrCat("tpserve_router_backend_healthy{", labels, "} 1")));
  // The backend's refusal of the request itself passes through.
  engine_->SetSubmitError(absl::OkStatus());
  v1::GenerateRequest bad = TextRequest("Hi", 2);
  bad.mutable_sampling()->set_temperature(-1);
  const grpc::Status invalid = RouterGenerate(bad, &responses);
  EXPECT_EQ(invalid.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(invalid.error_message(), HasSubstr("temperature"));
}

TEST_F(RouterGrpcFrontTest, FailuresAfterTheFirstMessage) {
  StartServers(Slow());
  StartRelayRouter();
  auto run = [this](absl::StatusCode code, const std::string& error) { return FailAfterFirstMessage("", code, error); };
  // The engine failed the request: serve's status, passed through.
  grpc::Status s = run(absl::StatusCode::kInternal, "the engine failed this request");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(s.error_message(), "the engine failed this request");
  // The server can serve nothing now: the router names the backend, and ejects it.
  s = run(absl::StatusCode::kUnavailable, "rank 1 is gone");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(s.error_message(), absl::StrCat("the backend ", BackendUrl(),
                                            " failed in the middle of the stream: gRPC UNAVAILABLE: rank 1 is gone"));
  EXPECT_THAT(Metrics(), HasSubstr("kind=\"stream_broken\"} 1"));
}

// A model whose backend is serve's HTTP port: the call goes as an OpenAI streamed request and
// comes back as the same text, finish and usage as the backend's own gRPC port gives.
TEST_F(RouterGrpcFrontTest, AnHttpBackendAnswersAsItsGrpcPortWould) {
  StartServers();
  const std::string http = absl::StrCat("http://127.0.0.1:", http_->port(), "/v1");
  StartRouter(absl::StrCat(R"({"h": {"backends": [{"url": ")", http, R"(", "model": "fake-model"}]}})"));
  const std::vector<v1::GenerateRequest> requests = ThreePrompts(/*logprobs=*/false);
  for (v1::GenerateRequest request : requests) {
    SCOPED_TRACE(request.ShortDebugString());
    std::vector<v1::GenerateResponse> relayed, direct;
    request.set_model("h");
    std::string backend;
    const grpc::Status s = RouterGenerate(request, &relayed, "", &backend);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(backend, http);
    request.set_model("fake-model");
    ASSERT_TRUE(Generate(request, &direct).ok());
    // Per choice: the text, the finish and its stop token, and (one choice) the usage; an
    // OpenAI stream has no token ids, and its usage is known at its end only.
    auto fold = [n = std::max(1, request.n())](const std::vector<v1::GenerateResponse>& messages) {
      std::map<int, v1::GenerateResponse> by_choice;
      for (const v1::GenerateResponse& r : messages) {
        v1::GenerateResponse& f = by_choice[r.index()];
        f.set_index(r.index());
        f.mutable_text()->append(r.text());
        if (r.finish_reason() == v1::FINISH_REASON_UNSPECIFIED) continue;
        f.set_finish_reason(r.finish_reason());
        if (r.has_stop_token_id()) f.set_stop_token_id(r.stop_token_id());
        f.mutable_usage()->set_prompt_tokens(r.usage().prompt_tokens());
        if (n == 1) f.mutable_usage()->set_completion_tokens(r.usage().completion_tokens());
      }
      std::vector<std::string> out;
      for (auto& [index, f] : by_choice) out.push_back(f.ShortDebugString());
      return out;
    };
    EXPECT_EQ(fold(relayed), fold(direct));
    EXPECT_NE(relayed.back().finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
    EXPECT_GT(relayed.back().usage().prompt_tokens(), 0);
  }
  // Logged and counted as any gRPC call, with the backend's usage.
  const std::vector<std::string> lines = LogLines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], HasSubstr(absl::StrCat(R"("model":"h","backend":")", http, R"(")")));
  EXPECT_THAT(lines[0], HasSubstr(R"("status":200,"success":true,"error":null,"prompt_tokens":)"));
  EXPECT_THAT(lines[0], HasSubstr(R"("grpc_status":"OK")"));
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("tpserve_router_requests_total{model=\"h\",door=\"grpc\",outcome=\"success\"} 3"));
  const std::string labels = absl::StrCat("model=\"h\",backend=\"", http, "\"");
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_requests_without_usage_total{", labels, "} 0")));
}

TEST_F(RouterGrpcFrontTest, WhatAnHttpBackendCannotAnswerGoesToAGrpcOneOrIsRefused) {
  StartServers();
  const std::string http = absl::StrCat("http://127.0.0.1:", http_->port(), "/v1");
  const std::string listing = absl::StrCat(R"({"url": ")", http, R"(", "model": "fake-model"})");
  StartRouter(absl::StrCat(R"({"h": {"backends": [)", listing, R"(]}, "both": {"policy": "round_robin", "backends": [)",
                           listing, R"(, {"url": "$G", "model": "fake-model"}]}})"));
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest request = TextRequest("Hi", 2);
  request.mutable_sampling()->set_logprobs(1);
  request.set_model("h");
  const grpc::Status s = RouterGenerate(request, &responses);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("sampling.logprobs cannot be sent to an http(s):// backend"));
  EXPECT_EQ(engine_->submitted(), 0);
  // With a grpc:// backend too, that one takes such requests; the rest go to both in turn.
  request.set_model("both");
  for (int i = 0; i < 2; ++i) {
    std::string backend;
    EXPECT_TRUE(RouterGenerate(request, &responses, "", &backend).ok());
    EXPECT_EQ(backend, BackendUrl());
  }
  request.mutable_sampling()->clear_logprobs();
  std::set<std::string> answered;
  for (int i = 0; i < 2; ++i) {
    std::string backend;
    EXPECT_TRUE(RouterGenerate(request, &responses, "", &backend).ok());
    answered.insert(backend);
  }
  EXPECT_THAT(answered, ::testing::ElementsAre(BackendUrl(), http));
}

TEST_F(RouterGrpcFrontTest, AnHttpBackendsFailuresAndRefusals) {
  StartServers(Slow());
  const std::string http = absl::StrCat("http://127.0.0.1:", http_->port(), "/v1");
  const std::string dead = absl::StrCat("http://127.0.0.1:", DeadPort(), "/v1");
  StartRouter(absl::StrCat(R"({"h": {"backends": [{"url": ")", http, R"(", "model": "fake-model"}]},)",
                           R"("dead": {"backends": [")", dead, R"("], "fallback": "h"}})"));
  const std::string labels = absl::StrCat("model=\"h\",backend=\"", http, "\"");
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest request = TextRequest("Hi", 2);
  // A dead replica is failed over before anything reached the client, here to the fallback
  // model's backend.
  request.set_model("dead");
  std::string backend;
  grpc::Status s = RouterGenerate(request, &responses, "", &backend);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(backend, http);
  EXPECT_THAT(Metrics(), HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{model=\"dead\",backend=\"",
                                                dead, "\",kind=\"connect\"} 1")));
  EXPECT_THAT(Metrics(), HasSubstr("tpserve_router_fallbacks_total{model=\"dead\",fallback=\"h\"} 1"));
  // Busy (HTTP 429): RESOURCE_EXHAUSTED, not ejected.
  request.set_model("h");
  engine_->SetSubmitError(absl::ResourceExhaustedError("the queue is full"));
  s = RouterGenerate(request, &responses);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("is over its queue limit"));
  EXPECT_THAT(Metrics(), HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{", labels, ",kind=\"busy\"} 1")));
  EXPECT_THAT(Metrics(), HasSubstr(absl::StrCat("tpserve_router_backend_healthy{", labels, "} 1")));
  engine_->SetSubmitError(absl::OkStatus());
  // The backend's refusal of the request (HTTP 400) passes through with its field.
  v1::GenerateRequest bad = request;
  bad.mutable_sampling()->set_temperature(-1);
  s = RouterGenerate(bad, &responses);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("the backend ", http, " answered HTTP 400: ")));
  EXPECT_THAT(s.error_message(), HasSubstr("temperature"));
  // After the first message: the engine's failure passes through; a backend that can serve
  // nothing now is named, and ejected.
  auto run = [this](absl::StatusCode code, const std::string& error) { return FailAfterFirstMessage("h", code, error); };
  s = run(absl::StatusCode::kInternal, "the engine failed this request");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(s.error_message(), "the engine failed this request");
  s = run(absl::StatusCode::kUnavailable, "rank 1 is gone");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(s.error_message(),
            absl::StrCat("the backend ", http, " failed in the middle of the stream: rank 1 is gone"));
  EXPECT_THAT(Metrics(),
              HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{", labels, ",kind=\"stream_broken\"} 1")));
  EXPECT_THAT(Metrics(), HasSubstr(absl::StrCat("tpserve_router_backend_healthy{", labels, "} 0")));
}

TEST_F(RouterGrpcFrontTest, AClientsCancelOrDeadlineCancelsAnHttpBackendsRequest) {
  StartServers(Slow());
  const std::string http = absl::StrCat("http://127.0.0.1:", http_->port(), "/v1");
  StartRouter(absl::StrCat(R"({"h": {"backends": [{"url": ")", http, R"(", "model": "fake-model"}]}})"));
  CancelAfterThreeMessages();
  EXPECT_TRUE(engine_->WaitForCancelled(1, absl::Seconds(10)));
  EXPECT_TRUE(Eventually([this] { return engine_->running() == 0; }));
  EXPECT_TRUE(Eventually([this] {
    const std::vector<std::string> lines = LogLines();
    return lines.size() == 1 && lines[0].find(R"("grpc_status":"CANCELLED")") != std::string::npos;
  }));
  // The client's deadline passing cancels it the same way: DEADLINE_EXCEEDED, the backend's
  // request cancelled, the backend neither failed nor ejected.
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    v1::GenerateRequest request = TextRequest("Hi", 200);
    request.mutable_sampling()->set_ignore_eos(true);
    auto reader = router_stub_->Generate(&context, request);
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  EXPECT_TRUE(engine_->WaitForCancelled(2, absl::Seconds(10)));
  EXPECT_TRUE(Eventually([this] {
    const std::vector<std::string> lines = LogLines();
    return lines.size() == 2 && lines[1].find(R"("grpc_status":"DEADLINE_EXCEEDED")") != std::string::npos;
  }));
  EXPECT_THAT(Metrics(),
              HasSubstr(absl::StrCat("tpserve_router_backend_healthy{model=\"h\",backend=\"", http, "\"} 1")));
}

// request_timeout_s with an http(s):// backend: an HTTP call carries no deadline, so the router's
// own timer ends it: DEADLINE_EXCEEDED naming the bound before the head came (a backend that never
// answers) and after the first message (serve's HTTP port streaming 200 tokens at 20 ms), the
// backend's request cancelled, the backend counted as timed out and not ejected.
TEST_F(RouterGrpcFrontTest, TheRequestTimeoutEndsAnHttpBackendsCall) {
  StartServers(Slow());
  SilentPort silent;
  const std::string silent_url = absl::StrCat("http://127.0.0.1:", silent.port(), "/v1");
  const std::string http = absl::StrCat("http://127.0.0.1:", http_->port(), "/v1");
  StartRouter(absl::StrCat(R"({"silent": {"request_timeout_s": 1, "backends": [")", silent_url,
                           R"("]}, "h": {"request_timeout_s": 1, "backends": [{"url": ")", http,
                           R"(", "model": "fake-model"}]}})"));
  const auto start = std::chrono::system_clock::now();
  std::vector<v1::GenerateResponse> responses;
  v1::GenerateRequest request = TextRequest("Hi", 5);
  request.set_model("silent");
  grpc::Status s = RouterGenerate(request, &responses);  // the client's deadline: 60 s
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("the request passed its request_timeout_s (1s from its arrival "
                                                        "at the router) before the backend ", silent_url, " answered")));
  EXPECT_TRUE(responses.empty());
  EXPECT_LT(std::chrono::system_clock::now() - start, std::chrono::seconds(5));

  request = TextRequest("Hi", 200);
  request.mutable_sampling()->set_ignore_eos(true);
  request.set_model("h");
  responses.clear();
  s = RouterGenerate(request, &responses);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat("request_timeout_s (1s from its arrival at the router) while the "
                                                        "backend ", http, " was streaming")));
  EXPECT_FALSE(responses.empty());
  EXPECT_TRUE(engine_->WaitForCancelled(1, absl::Seconds(10)));

  const std::string metrics = Metrics();
  for (const std::string& labels : {absl::StrCat("model=\"silent\",backend=\"", silent_url, "\""),
                                   absl::StrCat("model=\"h\",backend=\"", http, "\"")}) {
    EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{", labels, ",kind=\"timeout\"} 1")));
    EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_healthy{", labels, "} 1")));
  }
}

// Stats: the router's own numbers (the requests that ended and their tokens, its requests at
// backends now, its memory); the engine's fields zero.
TEST_F(RouterGrpcFrontTest, StatsAreTheRoutersOwn) {
  StartServers(Slow());
  StartRelayRouter();
  auto stats = [this] {
    grpc::ClientContext context;
    v1::StatsResponse response;
    EXPECT_TRUE(router_stub_->Stats(&context, v1::StatsRequest(), &response).ok());
    return response;
  };
  v1::StatsResponse before = stats();
  EXPECT_EQ(before.running(), 0);
  EXPECT_EQ(before.requests_finished(), 0);
  EXPECT_GT(before.rss_bytes(), 0);
  EXPECT_GE(before.peak_rss_bytes(), before.rss_bytes());
  std::vector<v1::GenerateResponse> responses;
  ASSERT_TRUE(RouterGenerate(TextRequest("Hello world", 5), &responses).ok());
  const v1::Usage usage = responses.back().usage();
  // One open call: running.
  grpc::ClientContext context;
  v1::GenerateRequest open = TextRequest("Hi", 200);
  open.mutable_sampling()->set_ignore_eos(true);
  auto reader = router_stub_->Generate(&context, open);
  v1::GenerateResponse r;
  ASSERT_TRUE(reader->Read(&r));
  const v1::StatsResponse during = stats();
  EXPECT_EQ(during.running(), 1);
  EXPECT_EQ(during.waiting(), 0);
  EXPECT_EQ(during.requests_finished(), 1);
  EXPECT_EQ(during.prompt_tokens(), usage.prompt_tokens());
  EXPECT_EQ(during.generation_tokens(), usage.completion_tokens());
  EXPECT_EQ(during.kv_usage(), 0);
  EXPECT_EQ(during.steps(), 0);
  EXPECT_EQ(during.weight_bytes(), 0);  // the backend's 5678 is not the router's
  context.TryCancel();
  while (reader->Read(&r)) {
  }
  reader->Finish();
  EXPECT_TRUE(Eventually([&] { return stats().running() == 0 && stats().requests_finished() == 2; }));
}

TEST_F(RouterGrpcFrontTest, HealthIsServing) {
  StartServers();
  StartRelayRouter();
  auto health = grpc::health::v1::Health::NewStub(router_channel_);
  for (const std::string service : {"", "tpserve.v1.TpServe"}) {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(health->Check(&context, request, &response).ok());
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
}

TEST(RouterGrpcPromptText, IsTheOpenAiBodysPromptText) {
  v1::GenerateRequest chat;
  for (const auto& [role, content] : std::vector<std::pair<std::string, std::string>>{{"system", "Be brief."},
                                                                                         {"user", "Hi"}}) {
    v1::ChatMessage* m = chat.mutable_chat()->add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  EXPECT_EQ(PromptText(chat), PromptText(nlohmann::json::parse(
                                  R"({"messages": [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})")));
  v1::GenerateRequest ids;
  for (int id : {3, 1, 4}) ids.mutable_token_ids()->add_ids(id);
  EXPECT_EQ(PromptText(ids), PromptText(nlohmann::json::parse(R"({"prompt": [3, 1, 4]})")));
  EXPECT_EQ(PromptText(TextRequest("Once", 1)), PromptText(nlohmann::json::parse(R"({"prompt": "Once"})")));
}

}  // namespace
}  // namespace tpserve
