// The OpenAI-compatible HTTP(S) target (see openai_target.h): one libcurl easy handle per
// request, parsing Server-Sent Events incrementally in the write callback.
#include "bench/tpbench/openai_target.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/api/sse_parser.h"
#include "nlohmann/json.hpp"

namespace tpserve::bench {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxErrorBodyBytes = size_t{64} << 10;  // of a non-200 body, kept for the message
constexpr size_t kBodyHeadBytes = 200;                   // quoted when a 200 body is not SSE

// Never throws: prompts decoded from random token ids need not be valid UTF-8.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string Truncate(absl::string_view s, size_t n) {
  return s.size() <= n ? std::string(s) : absl::StrCat(s.substr(0, n), "...");
}

const Json* Find(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

bool NonEmptyString(const Json* j) { return j != nullptr && j->is_string() && !j->get_ref<const std::string&>().empty(); }

void ReadInt(const Json& j, const char* key, int* out) {
  const Json* v = Find(j, key);
  if (v != nullptr && v->is_number_integer()) *out = v->get<int>();
}

// {"error": {"message": ...}}, {"error": "..."}, vLLM's {"message": ...}, FastAPI's
// {"detail": ...}: the human-readable part of an error object.
std::string ErrorText(const Json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (const Json* m = Find(e, "message"); NonEmptyString(m)) return m->get<std::string>();
  return Truncate(Dump(e), kBodyHeadBytes);
}

std::string HttpErrorMessage(const std::string& body) {
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  for (const char* key : {"error", "message", "detail"}) {
    if (const Json* e = Find(j, key); e != nullptr && !e->is_null()) return ErrorText(*e);
  }
  const absl::string_view trimmed = absl::StripAsciiWhitespace(body);
  return trimmed.empty() ? "(empty body)" : Truncate(trimmed, kBodyHeadBytes);
}

// JSON prints 0.7f as 0.699999988079071; go through the float's shortest decimal form.
double FloatForJson(float f) { return std::strtod(absl::StrCat(f).c_str(), nullptr); }

// The labels of one Prometheus text-format series line, `name{k="v",...} value`: each value
// unescaped (\\, \", \n); empty where the line has none or they do not parse.
std::vector<std::pair<std::string, std::string>> SeriesLabels(absl::string_view line) {
  std::vector<std::pair<std::string, std::string>> labels;
  size_t i = line.find('{');
  if (i == absl::string_view::npos) return labels;
  ++i;
  while (i < line.size() && line[i] != '}') {
    const size_t eq = line.find("=\"", i);
    if (eq == absl::string_view::npos) return {};
    std::string key(absl::StripAsciiWhitespace(line.substr(i, eq - i)));
    std::string value;
    size_t j = eq + 2;
    for (; j < line.size() && line[j] != '"'; ++j) {
      if (line[j] == '\\' && j + 1 < line.size()) {
        ++j;
        value += line[j] == 'n' ? '\n' : line[j];
      } else {
        value += line[j];
      }
    }
    if (j >= line.size()) return {};  // no closing quote
    labels.emplace_back(std::move(key), std::move(value));
    i = j + 1;
    if (i < line.size() && line[i] == ',') ++i;
  }
  return labels;
}

// What a server's /metrics page says of its storage: tpserve's `tpserve_model_info` (labels
// quantization, kv_cache_dtype, dtype) and vLLM's `vllm:cache_config_info` (cache_dtype).
// Fields the page does not name stay as they are.
void ReadStorageLabels(absl::string_view metrics, ServerInfo* info) {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    const bool ours = absl::StartsWith(line, "tpserve_model_info{");
    if (!ours && !absl::StartsWith(line, "vllm:cache_config_info{")) continue;
    for (auto& [key, value] : SeriesLabels(line)) {
      if (value.empty()) continue;
      if (ours && key == "quantization") info->quantization = value;
      if (ours && key == "kv_cache_dtype") info->kv_cache_dtype = value;
      if (ours && key == "dtype" && info->dtype.empty()) info->dtype = value;
      if (!ours && key == "cache_dtype" && info->kv_cache_dtype.empty()) info->kv_cache_dtype = value;
    }
  }
}

bool IsConnectError(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
      return true;
    default:
      return false;
  }
}

// One request from the first byte sent to the end of the stream; owns its StreamClock, so
// construct it just before curl_easy_perform.
class Transfer {
 public:
  Transfer(CURL* curl, bool chat, bool capture_output)
      : curl_(curl),
        chat_(chat),
        capture_output_(capture_output),
        parser_([this](const std::string& data) { return OnEvent(data); }) {
    if (capture_output_) outcome_.output_text.emplace();
  }
  Transfer(const Transfer&) = delete;  // the parser and curl hold pointers to it
  Transfer& operator=(const Transfer&) = delete;

  // CURLOPT_WRITEFUNCTION; returning less than it was given aborts the transfer.
  static size_t Write(char* data, size_t size, size_t count, void* self) {
    return static_cast<Transfer*>(self)->OnBytes(absl::string_view(data, size * count)) ? size * count : 0;
  }

  // CURLOPT_HEADERFUNCTION: one header line at a time (with its CRLF). A router names the
  // backend that answered; header names are case-insensitive.
  static size_t Header(char* data, size_t size, size_t count, void* self) {
    absl::string_view line(data, size * count);
    if (absl::StartsWithIgnoreCase(line, kBackendHeader)) {
      absl::string_view value = line.substr(kBackendHeader.size());
      static_cast<Transfer*>(self)->outcome_.backend = std::string(absl::StripAsciiWhitespace(value));
    }
    return size * count;
  }

  RequestOutcome Finish(CURLcode rc, const char* curl_error, const std::string& url, int64_t timeout_ms) {
    long status = 0;
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status);
    if (status == 200 && error_.empty()) parser_.Finish();
    std::string curl_message = curl_error[0] != '\0' ? curl_error : curl_easy_strerror(rc);
    long os_errno = 0;
    curl_easy_getinfo(curl_, CURLINFO_OS_ERRNO, &os_errno);
    if (rc == CURLE_COULDNT_CONNECT && os_errno != 0) {
      // curl 7.88 says "Couldn't connect to server"; the system's reason is the useful part.
      curl_message = std::error_code(static_cast<int>(os_errno), std::generic_category()).message();
    }
    const int chunks = clock_.tokens_seen();  // one token per chunk
    RequestOutcome& out = outcome_;
    if (!error_.empty()) {  // an error or malformed event; we aborted the transfer
      out.error = error_;
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
      out.timeout = true;
      out.error = absl::StrCat("timed out after ", timeout_ms, " ms (", chunks, " chunks received)");
    } else if (rc != CURLE_OK && status == 0) {
      out.error = IsConnectError(rc) ? absl::StrCat("cannot connect to ", url, ": ", curl_message)
                                     : absl::StrCat("request to ", url, " failed: ", curl_message);
    } else if (status != 200) {
      out.error = absl::StrCat("HTTP ", status, ": ", HttpErrorMessage(error_body_));
    } else if (!done_ && out.finish_reason.empty()) {
      // A broken connection after [DONE] or a finish_reason costs nothing measured.
      out.error = absl::StrCat("stream ended before the response finished (", chunks, " chunks received");
      if (rc != CURLE_OK) absl::StrAppend(&out.error, "; ", curl_message);
      if (events_ == 0 && !body_head_.empty()) {
        absl::StrAppend(&out.error, "; not an SSE stream, the body began: ", body_head_);
      }
      out.error += ")";
    } else {
      out.success = true;
    }
    clock_.Finish(&out);
    return out;
  }

 private:
  bool OnBytes(absl::string_view bytes) {
    if (status_ == 0) curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status_);
    if (status_ != 200) {
      if (error_body_.size() < kMaxErrorBodyBytes) {
        error_body_.append(bytes.data(), std::min(bytes.size(), kMaxErrorBodyBytes - error_body_.size()));
      }
      return true;
    }
    if (body_head_.size() < kBodyHeadBytes) {
      body_head_.append(bytes.data(), std::min(bytes.size(), kBodyHeadBytes - body_head_.size()));
    }
    return parser_.Feed(bytes);
  }

  bool OnEvent(const std::string& data) {
    ++events_;
    if (data == "[DONE]") {
      done_ = true;
      return true;
    }
    const Json j = Json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      error_ = absl::StrCat("malformed SSE event: ", absl::string_view(data).substr(0, 100));
      return false;
    }
    if (const Json* e = Find(j, "error"); e != nullptr && !e->is_null()) {
      error_ = absl::StrCat("server error in the stream: ", ErrorText(*e));
      return false;
    }
    if (const Json* choices = Find(j, "choices"); choices != nullptr && choices->is_array() && !choices->empty()) {
      const Json& choice = (*choices)[0];
      // vLLM's benchmark counts one token per chunk that carries text; usage corrects
      // the total. Chat: the first chunk usually carries only the role. Reasoning models
      // stream their thinking as reasoning_content (vLLM) or reasoning (Groq): tokens too.
      bool has_text = false;
      if (chat_) {
        if (const Json* delta = Find(choice, "delta")) {
          has_text = NonEmptyString(Find(*delta, "content")) || NonEmptyString(Find(*delta, "reasoning_content")) ||
                     NonEmptyString(Find(*delta, "reasoning"));
        }
      } else {
        has_text = NonEmptyString(Find(choice, "text"));
      }
      if (has_text) clock_.OnChunk(1);
      if (has_text && capture_output_) AppendText(choice);
      if (const Json* reason = Find(choice, "finish_reason"); NonEmptyString(reason)) {
        outcome_.finish_reason = reason->get<std::string>();
      }
    }
    const Json* usage = Find(j, "usage");
    if (usage == nullptr || !usage->is_object()) {  // Groq: {"x_groq": {"usage": {...}}}
      if (const Json* groq = Find(j, "x_groq")) usage = Find(*groq, "usage");
    }
    if (usage != nullptr && usage->is_object()) {
      ReadInt(*usage, "prompt_tokens", &outcome_.prompt_tokens);
      ReadInt(*usage, "completion_tokens", &outcome_.completion_tokens);
    }
    return true;
  }

  // The chunk's generated text, in arrival order: a chat's reasoning, then its content.
  void AppendText(const Json& choice) {
    std::string& out = *outcome_.output_text;  // emplaced at construction
    auto append = [&out](const Json* j) {
      if (NonEmptyString(j)) out += j->get_ref<const std::string&>();
    };
    if (!chat_) {
      append(Find(choice, "text"));
    } else if (const Json* delta = Find(choice, "delta")) {
      append(Find(*delta, "reasoning_content"));
      append(Find(*delta, "reasoning"));
      append(Find(*delta, "content"));
    }
  }

  static constexpr absl::string_view kBackendHeader = "x-tpserve-backend:";

  CURL* const curl_;
  const bool chat_;
  const bool capture_output_;
  StreamClock clock_;
  SseParser parser_;
  RequestOutcome outcome_;
  long status_ = 0;         // HTTP status, read at the first body bytes
  std::string error_body_;  // a non-200 response's body
  std::string body_head_;   // a 200 response's first bytes
  std::string error_;       // set when an event ends the stream in error
  bool done_ = false;       // "[DONE]" seen
  int events_ = 0;          // data events seen
};

struct CurlEasyDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct CurlSlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

class OpenAiTarget : public Target {
 public:
  explicit OpenAiTarget(OpenAiTargetOptions options)
      : options_(std::move(options)),
        url_(absl::StrCat(options_.base_url, options_.chat ? "/chat/completions" : "/completions")) {
    header_lines_ = {"Content-Type: application/json", "Accept: text/event-stream",
                     // curl sends "Expect: 100-continue" with bodies over 1 KiB and waits up to
                     // 1 s for an answer many servers never send: that would land in TTFT.
                     "Expect:"};
    if (!options_.api_key.empty()) header_lines_.push_back(absl::StrCat("Authorization: Bearer ", options_.api_key));
  }

  std::string Name() const override { return options_.base_url; }
  bool AcceptsTokenIds() const override { return !options_.chat && options_.send_token_ids; }

  // GET {base}/models: the served model (the requested one, else the first) and, where
  // the server says (vLLM, tpserve), its max_model_len. Then, where the server has one, its
  // Prometheus page (the base without a trailing /v1, + /metrics): the weights' and the KV
  // cache's storage (ReadStorageLabels). A server without it (a hosted API) says nothing there.
  absl::StatusOr<ServerInfo> Info() override {
    const std::string url = absl::StrCat(options_.base_url, "/models");
    absl::StatusOr<std::string> body = Get(url);
    if (!body.ok()) return body.status();
    const Json j = Json::parse(*body, nullptr, /*allow_exceptions=*/false);
    const Json* data = Find(j, "data");
    if (data == nullptr || !data->is_array() || data->empty()) {
      return absl::UnavailableError(absl::StrCat("GET ", url, ": no \"data\" list of models"));
    }
    const Json* model = &(*data)[0];
    for (const Json& m : *data) {
      if (const Json* id = Find(m, "id"); NonEmptyString(id) && id->get<std::string>() == options_.model) model = &m;
    }
    ServerInfo info;
    if (const Json* id = Find(*model, "id"); NonEmptyString(id)) info.model = id->get<std::string>();
    if (const Json* len = Find(*model, "max_model_len"); len != nullptr && len->is_number_integer()) {
      info.max_model_len = len->get<int64_t>();
    }
    absl::string_view root = options_.base_url;
    absl::ConsumeSuffix(&root, "/v1");
    if (absl::StatusOr<std::string> metrics = Get(absl::StrCat(root, "/metrics")); metrics.ok()) {
      ReadStorageLabels(*metrics, &info);
    }
    return info;
  }

  RequestOutcome Send(const BenchRequest& request, absl::Duration timeout) override {
    const std::string body = Dump(Body(request));
    // Non-positive or infinite: no limit (curl's 0).
    const int64_t timeout_ms = timeout == absl::InfiniteDuration() || timeout <= absl::ZeroDuration()
                                   ? 0
                                   : std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout));
    std::unique_ptr<CURL, CurlEasyDeleter> curl = TakeHandle();
    std::unique_ptr<curl_slist, CurlSlistDeleter> headers = Headers();
    if (curl == nullptr || headers == nullptr) {
      RequestOutcome out;
      out.error = "cannot set up a libcurl request (out of memory?)";
      StreamClock().Finish(&out);
      return out;
    }
    char curl_error[CURL_ERROR_SIZE] = {};
    CURL* c = curl.get();
    curl_easy_setopt(c, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c, CURLOPT_USERAGENT, "tpbench");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // signals are process-wide; we run many threads
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms));
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_error);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Transfer::Write);
    Transfer transfer(c, options_.chat, options_.capture_output);  // starts the clock
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &Transfer::Header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &transfer);
    const CURLcode rc = curl_easy_perform(c);
    RequestOutcome out = transfer.Finish(rc, curl_error, url_, timeout_ms);
    ReturnHandle(std::move(curl));
    return out;
  }

 private:
  // An idle handle (its connection still open, options reset) or a new one.
  // The body of a GET that answered 200 within 10 s; UNAVAILABLE naming the URL otherwise.
  absl::StatusOr<std::string> Get(const std::string& url) const {
    std::unique_ptr<CURL, CurlEasyDeleter> curl(curl_easy_init());
    std::unique_ptr<curl_slist, CurlSlistDeleter> headers = Headers();
    if (curl == nullptr || headers == nullptr) return absl::InternalError("cannot set up a libcurl request");
    std::string body;
    char curl_error[CURL_ERROR_SIZE] = {};
    CURL* c = curl.get();
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(c, CURLOPT_USERAGENT, "tpbench");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_error);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t n, void* out) {
      static_cast<std::string*>(out)->append(data, size * n);
      return size * n;
    });
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    const CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
      return absl::UnavailableError(absl::StrCat("GET ", url, ": ", curl_error[0] ? curl_error : curl_easy_strerror(rc)));
    }
    if (status != 200) return absl::UnavailableError(absl::StrCat("GET ", url, ": HTTP ", status));
    return body;
  }

  std::unique_ptr<CURL, CurlEasyDeleter> TakeHandle() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        std::unique_ptr<CURL, CurlEasyDeleter> h = std::move(idle_.back());
        idle_.pop_back();
        curl_easy_reset(h.get());  // keeps live connections and the DNS/TLS session caches
        return h;
      }
    }
    return std::unique_ptr<CURL, CurlEasyDeleter>(curl_easy_init());
  }
  // At most one idle handle per request that ran at once: the closed loop's concurrency.
  void ReturnHandle(std::unique_ptr<CURL, CurlEasyDeleter> h) {
    if (!options_.reuse_connections || h == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(h));
  }

  std::unique_ptr<curl_slist, CurlSlistDeleter> Headers() const {
    curl_slist* list = nullptr;
    for (const std::string& line : header_lines_) {
      curl_slist* appended = curl_slist_append(list, line.c_str());
      if (appended == nullptr) {  // the list so far is still ours
        curl_slist_free_all(list);
        return nullptr;
      }
      list = appended;
    }
    return std::unique_ptr<curl_slist, CurlSlistDeleter>(list);
  }

  Json Body(const BenchRequest& request) const {
    Json body = Json::object();
    if (!options_.model.empty()) body["model"] = options_.model;
    if (options_.chat) {
      body["messages"] = Json::array({Json{{"role", "user"}, {"content", request.text}}});
    } else if (AcceptsTokenIds() && !request.token_ids.empty()) {
      body["prompt"] = request.token_ids;
    } else {
      body["prompt"] = request.text;
    }
    body["max_tokens"] = request.max_tokens;
    body["stream"] = true;
    if (options_.include_usage) body["stream_options"] = Json{{"include_usage", true}};
    if (request.temperature.has_value()) body["temperature"] = FloatForJson(*request.temperature);
    if (request.ignore_eos) body["ignore_eos"] = true;
    return body;
  }

  const OpenAiTargetOptions options_;
  const std::string url_;
  std::vector<std::string> header_lines_;
  std::mutex mu_;
  std::vector<std::unique_ptr<CURL, CurlEasyDeleter>> idle_;  // guarded by mu_
};

absl::Status InitCurlOnce() {
  static std::once_flag once;
  static CURLcode rc = CURLE_OK;
  std::call_once(once, [] { rc = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (rc != CURLE_OK) return absl::InternalError(absl::StrCat("curl_global_init failed: ", curl_easy_strerror(rc)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Target>> MakeOpenAiTarget(OpenAiTargetOptions options) {
  constexpr absl::string_view kExample = "e.g. http://localhost:8000/v1 or https://api.groq.com/openai/v1";
  std::string& url = options.base_url;
  if (url.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("OpenAI target: the base URL is empty; give the API root, ", kExample));
  }
  const std::string lower = absl::AsciiStrToLower(url);
  const size_t scheme_len = absl::StartsWith(lower, "http://") ? 7 : absl::StartsWith(lower, "https://") ? 8 : 0;
  if (scheme_len == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("OpenAI target: base URL \"", url, "\" must start with http:// or https://, ", kExample));
  }
  if (url.find_first_not_of('/', scheme_len) == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("OpenAI target: base URL \"", url, "\" has no host, ", kExample));
  }
  while (absl::EndsWith(url, "/")) url.pop_back();
  if (absl::Status s = InitCurlOnce(); !s.ok()) return s;
  return std::make_unique<OpenAiTarget>(std::move(options));
}

}  // namespace tpserve::bench
