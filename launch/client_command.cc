// `tpserve client` over gRPC (tpserve.v1 stub) or HTTP (httplib, SSE). Tested by
// tests/frontend_test.cc against both servers.
#include "launch/client_command.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "coordinator/api/grpc_server_start.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "proto/tpserve.grpc.pb.h"

namespace tpserve {
namespace {

using Json = nlohmann::json;

// Client-side clock: TTFT and decode rate.
class Clock {
 public:
  void OnTokens(int n) {
    if (n <= 0) return;
    const absl::Time now = absl::Now();
    if (first_ == absl::InfinitePast()) {
      first_ = now;
      tokens_after_first_ = n - 1;
    } else {
      tokens_after_first_ += n;
    }
    last_ = now;
  }
  // The server's count, when chunks do not map one-to-one to tokens.
  void SetTotalTokens(int n) {
    if (first_ != absl::InfinitePast() && n > 0) tokens_after_first_ = n - 1;
  }
  void Fill(ClientResult* r) const {
    const absl::Time end = absl::Now();
    r->total_ms = absl::ToDoubleMilliseconds(end - start_);
    if (first_ == absl::InfinitePast()) return;
    r->ttft_ms = absl::ToDoubleMilliseconds(first_ - start_);
    const double decode_s = absl::ToDoubleSeconds(last_ - first_);
    if (decode_s > 0) r->decode_tokens_per_s = tokens_after_first_ / decode_s;
  }

 private:
  const absl::Time start_ = absl::Now();
  absl::Time first_ = absl::InfinitePast(), last_ = absl::InfinitePast();
  int tokens_after_first_ = 0;
};

// Plaintext, or TLS with the CA and client certificate files read.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const ClientCommandOptions& o) {
  if (!o.grpc_tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!o.grpc_tls_ca_file.empty()) {
    absl::StatusOr<std::string> cas = ReadPemFile("--grpc-tls-ca-file", o.grpc_tls_ca_file, "CERTIFICATE");
    if (!cas.ok()) return cas.status();
    ssl.pem_root_certs = *std::move(cas);
  }
  if (!o.grpc_tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPemFile("--grpc-tls-certfile", o.grpc_tls_cert_file, "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile("--grpc-tls-keyfile", o.grpc_tls_key_file, "");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<ClientResult> RunGrpc(const ClientCommandOptions& o, std::ostream& out) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials = Credentials(o);
  if (!credentials.ok()) return credentials.status();
  auto channel = grpc::CreateChannel(o.grpc_target, *credentials);
  auto stub = v1::TpServe::NewStub(channel);
  v1::GenerateRequest request;
  request.set_model(o.model);
  if (o.chat) {
    v1::ChatMessage* m = request.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(o.prompt);
  } else {
    request.set_text(o.prompt);
  }
  request.mutable_sampling()->set_max_tokens(o.max_tokens);
  if (o.temperature.has_value()) request.mutable_sampling()->set_temperature(*o.temperature);

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(o.timeout));
  if (!o.api_key.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", o.api_key));
  Clock clock;
  ClientResult result;
  auto reader = stub->Generate(&context, request);
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    clock.OnTokens(r.token_ids_size());
    out << r.text() << std::flush;
    result.text += r.text();
    result.prompt_tokens = r.usage().prompt_tokens();
    result.completion_tokens = r.usage().completion_tokens();
    if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      result.finish_reason = r.finish_reason() == v1::FINISH_REASON_STOP ? "stop" : "length";
      const v1::Timings& t = r.timings();
      result.server_timings = absl::StrFormat("queue %.1f ms, prefill %.1f ms, first token %.1f ms, decode %.1f ms",
                                              t.queue_ms(), t.prefill_ms(), t.first_token_ms(), t.decode_ms());
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("gRPC ", o.grpc_target, ": ", status.error_message()));
  }
  clock.Fill(&result);
  return result;
}

// Splits "http://host:port/v1" into the client's "http://host:port" and the API prefix.
void SplitUrl(const std::string& url, std::string* origin, std::string* api_prefix) {
  const size_t scheme_end = url.find("://");
  const size_t path_start = url.find('/', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  *origin = url.substr(0, path_start);
  absl::string_view path = path_start == std::string::npos ? "" : absl::string_view(url).substr(path_start);
  absl::ConsumeSuffix(&path, "/");
  absl::ConsumeSuffix(&path, "/v1");
  *api_prefix = std::string(path);
}

absl::StatusOr<ClientResult> RunHttp(const ClientCommandOptions& o, std::ostream& out) {
  std::string origin, prefix;
  SplitUrl(o.http_url, &origin, &prefix);
  Json body = {{"max_tokens", o.max_tokens}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  if (!o.model.empty()) body["model"] = o.model;
  if (o.temperature.has_value()) body["temperature"] = *o.temperature;
  if (o.chat) {
    body["messages"] = Json::array({{{"role", "user"}, {"content", o.prompt}}});
  } else {
    body["prompt"] = o.prompt;
  }
  const std::string path = prefix + (o.chat ? "/v1/chat/completions" : "/v1/completions");

  httplib::Client client(origin);
  if (!client.is_valid()) return absl::InvalidArgumentError(absl::StrCat("--http: cannot use \"", o.http_url, "\""));
  const int64_t timeout_s = absl::ToInt64Seconds(o.timeout);
  client.set_read_timeout(timeout_s, 0);

  Clock clock;
  ClientResult result;
  std::string buffer;
  absl::Status stream_error;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  if (!o.api_key.empty()) req.headers.emplace("Authorization", absl::StrCat("Bearer ", o.api_key));
  req.body = body.dump();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string raw = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      absl::string_view event = raw;
      if (!absl::ConsumePrefix(&event, "data: ")) continue;  // a comment or keep-alive
      if (event == "[DONE]") continue;
      Json chunk = Json::parse(event.begin(), event.end(), nullptr, /*allow_exceptions=*/false);
      if (chunk.is_discarded()) {
        stream_error = absl::InternalError(absl::StrCat("not JSON in the event stream: ", event));
        continue;
      }
      if (chunk.contains("error")) {
        stream_error = absl::InternalError(chunk["error"].value("message", std::string(event)));
        continue;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        result.prompt_tokens = chunk["usage"].value("prompt_tokens", 0);
        result.completion_tokens = chunk["usage"].value("completion_tokens", 0);
      }
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      const Json& choice = chunk["choices"][0];
      std::string text;
      if (o.chat) {
        if (choice.contains("delta") && choice["delta"].contains("content")) text = choice["delta"]["content"];
      } else {
        text = choice.value("text", "");
      }
      // One SSE chunk carries at least one token, unless it is only the role or the finish.
      if (!text.empty()) clock.OnTokens(1);
      out << text << std::flush;
      result.text += text;
      if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
        result.finish_reason = choice["finish_reason"];
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  if (!client.send(req, res, error)) {
    return absl::UnavailableError(absl::StrCat("HTTP ", origin, ": ", httplib::to_string(error)));
  }
  if (res.status != 200) {
    Json e = Json::parse(buffer, nullptr, false);
    const std::string message = e.is_object() && e.contains("error") ? e["error"].value("message", buffer) : buffer;
    const std::string what = absl::StrCat("HTTP ", res.status, ": ", message);
    if (res.status == 401) return absl::UnauthenticatedError(absl::StrCat(what, " (pass --api-key)"));
    return absl::UnknownError(what);
  }
  if (!stream_error.ok()) return stream_error;
  clock.SetTotalTokens(result.completion_tokens);
  clock.Fill(&result);
  return result;
}

absl::Status CheckOptions(const ClientCommandOptions& options) {
  if (options.grpc_target.empty() == options.http_url.empty()) {
    return absl::InvalidArgumentError("give exactly one of --grpc HOST:PORT and --http URL");
  }
  if (options.prompt.empty()) return absl::InvalidArgumentError("--prompt is required");
  const bool tls_files = !options.grpc_tls_ca_file.empty() || !options.grpc_tls_cert_file.empty() ||
                         !options.grpc_tls_key_file.empty();
  if (tls_files && (!options.grpc_tls || options.grpc_target.empty())) {
    return absl::InvalidArgumentError("--grpc-tls-ca-file, --grpc-tls-certfile and --grpc-tls-keyfile apply to "
                                      "--grpc HOST:PORT with --grpc-tls");
  }
  if (options.grpc_tls && options.grpc_target.empty()) {
    return absl::InvalidArgumentError("--grpc-tls applies to --grpc HOST:PORT (for HTTP, give an https:// URL)");
  }
  if (options.grpc_tls_cert_file.empty() != options.grpc_tls_key_file.empty()) {
    return absl::InvalidArgumentError("a client certificate needs both --grpc-tls-certfile and --grpc-tls-keyfile");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClientResult> RunClientRequest(const ClientCommandOptions& options, std::ostream& text_out) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  return options.grpc_target.empty() ? RunHttp(options, text_out) : RunGrpc(options, text_out);
}

int RunClient(const ClientCommandOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) {
    std::fprintf(stderr, "tpserve client: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<ClientResult> r = RunClientRequest(options, std::cout);
  std::cout << std::endl;
  if (!r.ok()) {
    std::fprintf(stderr, "tpserve client: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "--\n%d prompt + %d completion tokens, finish_reason %s\n", r->prompt_tokens,
               r->completion_tokens, r->finish_reason.empty() ? "?" : r->finish_reason.c_str());
  std::fprintf(stderr, "TTFT %.1f ms, total %.1f ms, decode %.1f tokens/s\n", r->ttft_ms, r->total_ms,
               r->decode_tokens_per_s);
  if (!r->server_timings.empty()) std::fprintf(stderr, "server: %s\n", r->server_timings.c_str());
  return 0;
}

}  // namespace tpserve
