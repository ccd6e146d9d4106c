// The front-end tests' fixture: a fake engine behind both servers on loopback ports, a
// gRPC stub, and HTTP helpers. Used by tests/frontend_test.cc and frontend_http_test.cc.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "coordinator/text/chat_template_loader.h"
#include "coordinator/api/frontend_metrics.h"
#include "coordinator/api/grpc_server.h"
#include "coordinator/api/http_server.h"
#include "coordinator/text/tokenizer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/tpserve.grpc.pb.h"
#include "tests/fake_engine.h"
#include "tests/fixture_files.h"

namespace tpserve {

// Waits for `done` (polled) up to `timeout`.
template <typename F>
bool Eventually(F done, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return done();
}

struct HttpResult {
  int status = -1;
  std::string body;
};

class FrontendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tokenizer = Tokenizer::FromFile(Fixture("tokenizers/qwen2/tokenizer.json"));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    // A model directory with Qwen 2.5's chat template.
    model_dir_ = std::filesystem::temp_directory_path() / absl::StrCat("tpserve_frontend_test_", getpid());
    std::filesystem::create_directories(model_dir_);
    std::ofstream(model_dir_ / "chat_template.jinja") << ReadFile(Fixture("chat_templates/qwen2_5.jinja"));
    std::ofstream(model_dir_ / "tokenizer_config.json") << ReadFile(Fixture("tokenizers/qwen2/tokenizer_config.json"));
    auto chat = LoadChatTemplate(model_dir_.string());
    ASSERT_TRUE(chat.ok()) << chat.status();
    chat_template_ = std::make_unique<ModelChatTemplate>(*std::move(chat));
  }

  void TearDown() override {
    http_.reset();
    grpc_.reset();
    metrics_.reset();
    engine_.reset();
    std::filesystem::remove_all(model_dir_);
  }

  void StartServers(FakeEngineOptions engine_options = {}, std::vector<std::string> served_names = {},
                    bool ready = true) {
    engine_ = std::make_unique<FakeEngine>(*tokenizer_, engine_options);
    engine_->SetReady(ready);
    metrics_ = std::make_unique<FrontendMetrics>(*engine_, engine_options.served_model_name);
    GrpcServerOptions g = grpc_options_;
    g.listen.address = "127.0.0.1:0";
    g.frontend.served_model_names = served_names;
    g.health_poll_interval = absl::Milliseconds(10);
    g.frontend.metrics = metrics_.get();
    grpc_ = std::make_unique<GrpcServer>(*engine_, *tokenizer_, chat_template_.get(), g);
    ASSERT_TRUE(grpc_->Start().ok());
    HttpServerOptions h = http_options_;
    h.transport.host = "127.0.0.1";
    h.transport.port = 0;
    h.transport.max_body_bytes = 64 << 10;
    h.frontend.served_model_names = served_names;
    h.frontend.metrics = metrics_.get();
    http_ = std::make_unique<HttpServer>(*engine_, *tokenizer_, chat_template_.get(), h);
    ASSERT_TRUE(http_->Start().ok());
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_->port()), grpc::InsecureChannelCredentials());
    stub_ = v1::TpServe::NewStub(channel_);
  }

  // Runs a Generate call to the end.
  grpc::Status Generate(const v1::GenerateRequest& request, std::vector<v1::GenerateResponse>* responses) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse r;
    while (reader->Read(&r)) responses->push_back(r);
    return reader->Finish();
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus HealthStatus(const std::string& service) {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status s = health->Check(&context, request, &response);
    return s.ok() ? response.status() : grpc::health::v1::HealthCheckResponse::UNKNOWN;
  }

  HttpResult Post(const std::string& path, const std::string& body) {
    httplib::Client client("127.0.0.1", http_->port());
    client.set_read_timeout(60, 0);
    auto res = client.Post(path.c_str(), body, "application/json");
    if (!res) return {-1, httplib::to_string(res.error())};
    return {res->status, res->body};
  }

  HttpResult Get(const std::string& path) {
    httplib::Client client("127.0.0.1", http_->port());
    auto res = client.Get(path.c_str());
    if (!res) return {-1, httplib::to_string(res.error())};
    return {res->status, res->body};
  }

  // The data payloads of an SSE body.
  static std::vector<std::string> SsePayloads(const std::string& body) {
    std::vector<std::string> out;
    for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
      EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
      out.emplace_back(event.substr(6));
    }
    return out;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::filesystem::path model_dir_;
  std::unique_ptr<ModelChatTemplate> chat_template_;
  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<FrontendMetrics> metrics_;
  std::unique_ptr<GrpcServer> grpc_;
  std::unique_ptr<HttpServer> http_;
  HttpServerOptions http_options_;  // a test may change them before StartServers()
  GrpcServerOptions grpc_options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TpServe::Stub> stub_;
};

inline FakeEngineOptions Slow() {
  FakeEngineOptions o;
  o.token_delay = absl::Milliseconds(20);
  return o;
}

inline v1::GenerateRequest TextRequest(const std::string& text, int max_tokens) {
  v1::GenerateRequest r;
  r.set_text(text);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  return r;
}

}  // namespace tpserve
