// JSON encoding of tpbench's records (requests.jsonl lines, run.json). Round trips and
// the error messages for malformed input are tested by tests/tpbench_core_test.cc.
#include "bench/tpbench/record.h"

#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/base.h"

namespace tpserve::bench {
namespace {

using Json = nlohmann::json;

// Reads one field of a JSON object into *out. `where` prefixes the field name in error
// messages (e.g. "levels[2]."), so a user can find the bad value in their file. A null
// value counts as absent: NaN/inf are written as null by nlohmann::json.
class FieldReader {
 public:
  FieldReader(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}

  absl::Status Get(const char* name, bool required, bool* out) const {
    const Json* v = nullptr;
    if (absl::Status s = Find(name, required, &v); !s.ok() || v == nullptr) return s;
    if (!v->is_boolean()) return WrongType(name, "a boolean", *v);
    *out = v->get<bool>();
    return absl::OkStatus();
  }
  absl::Status Get(const char* name, bool required, int64_t* out) const {
    const Json* v = nullptr;
    if (absl::Status s = Find(name, required, &v); !s.ok() || v == nullptr) return s;
    if (!v->is_number_integer()) return WrongType(name, "an integer", *v);
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return WrongType(name, "an integer that fits in 64 bits", *v);
    }
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }
  absl::Status Get(const char* name, bool required, int* out) const {
    int64_t wide = *out;
    if (absl::Status s = Get(name, required, &wide); !s.ok()) return s;
    if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("field \"", where_, name, "\" is ", wide, ", out of the 32-bit range"));
    }
    *out = static_cast<int>(wide);
    return absl::OkStatus();
  }
  absl::Status Get(const char* name, bool required, double* out) const {
    const Json* v = nullptr;
    if (absl::Status s = Find(name, required, &v); !s.ok() || v == nullptr) return s;
    if (!v->is_number()) return WrongType(name, "a number", *v);
    *out = v->get<double>();
    return absl::OkStatus();
  }
  absl::Status Get(const char* name, bool required, std::string* out) const {
    const Json* v = nullptr;
    if (absl::Status s = Find(name, required, &v); !s.ok() || v == nullptr) return s;
    if (!v->is_string()) return WrongType(name, "a string", *v);
    *out = v->get<std::string>();
    return absl::OkStatus();
  }
  absl::Status Get(const char* name, bool required, std::vector<double>* out) const {
    const Json* v = nullptr;
    if (absl::Status s = Find(name, required, &v); !s.ok() || v == nullptr) return s;
    if (!v->is_array()) return WrongType(name, "an array of numbers", *v);
    out->clear();
    out->reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "field \"", where_, name, "[", i, "]\" must be a number, got ", (*v)[i].type_name()));
      }
      out->push_back((*v)[i].get<double>());
    }
    return absl::OkStatus();
  }

  // Sets *v to the field's value, or to nullptr when it is absent/null and optional.
  absl::Status Find(const char* name, bool required, const Json** v) const {
    *v = nullptr;
    auto it = j_.find(name);
    if (it == j_.end() || it->is_null()) {
      if (!required) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat("required field \"", where_, name, "\" is ",
                                                     it == j_.end() ? "missing" : "null"));
    }
    *v = &*it;
    return absl::OkStatus();
  }

 private:
  absl::Status WrongType(const char* name, const char* want, const Json& got) const {
    return absl::InvalidArgumentError(absl::StrCat("field \"", where_, name, "\" must be ", want,
                                                   ", got ", got.type_name(), " ", got.dump()));
  }

  const Json& j_;
  std::string where_;
};

constexpr bool kRequired = true;
constexpr bool kOptional = false;

absl::Status RequireObject(const Json& j, const std::string& what) {
  if (j.is_object()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " must be a JSON object, got ", j.type_name()));
}

Json ToJson(const ServerStepTime& s) {
  return Json{{"available", s.available},
              {"steps", s.steps},
              {"compute_ms", s.compute_ms},
              {"allreduce_ms", s.allreduce_ms},
              {"scheduling_ms", s.scheduling_ms},
              {"pipeline_ms", s.pipeline_ms},
              {"stages_busy_ms", s.stages_busy_ms},
              {"preemptions", s.preemptions},
              {"prefix_cache_hit_rate", s.prefix_cache_hit_rate},
              {"peak_rss_bytes", s.peak_rss_bytes},
              {"spec_drafts", s.spec_drafts},
              {"spec_draft_tokens", s.spec_draft_tokens},
              {"spec_accepted_tokens", s.spec_accepted_tokens}};
}

Json ToJson(const LevelRecord& l) {
  return Json{{"concurrency", l.concurrency},
              {"request_rate", l.request_rate},
              {"rounds", l.rounds},
              {"start_s", l.start_s},
              {"end_s", l.end_s},
              {"server", ToJson(l.server)}};
}

absl::StatusOr<LevelRecord> LevelFromJson(const Json& j, const std::string& where) {
  TP_RETURN_IF_ERROR(RequireObject(j, where));
  const std::string prefix = where + ".";
  FieldReader f(j, prefix);
  LevelRecord l;
  TP_RETURN_IF_ERROR(f.Get("concurrency", kRequired, &l.concurrency));
  TP_RETURN_IF_ERROR(f.Get("request_rate", kOptional, &l.request_rate));
  TP_RETURN_IF_ERROR(f.Get("rounds", kOptional, &l.rounds));
  TP_RETURN_IF_ERROR(f.Get("start_s", kRequired, &l.start_s));
  TP_RETURN_IF_ERROR(f.Get("end_s", kRequired, &l.end_s));
  const Json* server = nullptr;
  TP_RETURN_IF_ERROR(f.Find("server", kOptional, &server));
  if (server != nullptr) {
    TP_RETURN_IF_ERROR(RequireObject(*server, prefix + "server"));
    FieldReader s(*server, prefix + "server.");
    TP_RETURN_IF_ERROR(s.Get("available", kOptional, &l.server.available));
    TP_RETURN_IF_ERROR(s.Get("steps", kOptional, &l.server.steps));
    TP_RETURN_IF_ERROR(s.Get("compute_ms", kOptional, &l.server.compute_ms));
    TP_RETURN_IF_ERROR(s.Get("allreduce_ms", kOptional, &l.server.allreduce_ms));
    TP_RETURN_IF_ERROR(s.Get("scheduling_ms", kOptional, &l.server.scheduling_ms));
    TP_RETURN_IF_ERROR(s.Get("pipeline_ms", kOptional, &l.server.pipeline_ms));
    TP_RETURN_IF_ERROR(s.Get("stages_busy_ms", kOptional, &l.server.stages_busy_ms));
    TP_RETURN_IF_ERROR(s.Get("preemptions", kOptional, &l.server.preemptions));
    TP_RETURN_IF_ERROR(s.Get("prefix_cache_hit_rate", kOptional, &l.server.prefix_cache_hit_rate));
    TP_RETURN_IF_ERROR(s.Get("peak_rss_bytes", kOptional, &l.server.peak_rss_bytes));
    TP_RETURN_IF_ERROR(s.Get("spec_drafts", kOptional, &l.server.spec_drafts));
    TP_RETURN_IF_ERROR(s.Get("spec_draft_tokens", kOptional, &l.server.spec_draft_tokens));
    TP_RETURN_IF_ERROR(s.Get("spec_accepted_tokens", kOptional, &l.server.spec_accepted_tokens));
  }
  return l;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return text;
}

}  // namespace

nlohmann::json ToJson(const RequestRecord& r) {
  const RequestOutcome& o = r.outcome;
  Json j{{"seq", r.seq},
              {"timestamp", r.timestamp},
              {"send_time_s", r.send_time_s},
              {"target", r.target},
              {"concurrency", r.concurrency},
              {"request_rate", r.request_rate},
              {"round", r.round},
              {"expected_prompt_tokens", r.expected_prompt_tokens},
              {"max_tokens", r.max_tokens},
              {"success", o.success},
              {"timeout", o.timeout},
              {"error", o.error},
              {"latency_ms", o.latency_ms},
              {"ttft_ms", o.ttft_ms},
              {"itl_ms", o.itl_ms},
              {"prompt_tokens", o.prompt_tokens},
              {"completion_tokens", o.completion_tokens},
              {"finish_reason", o.finish_reason},
              {"server_queue_ms", o.server_queue_ms},
              {"backend", o.backend.empty() ? Json() : Json(o.backend)},
              {"prompt_index", r.prompt_index}};
  if (o.output_text.has_value()) j["output_text"] = *o.output_text;
  if (o.output_token_ids.has_value()) j["output_token_ids"] = *o.output_token_ids;
  return j;
}

// Required: what the metrics cannot do without. Everything else defaults as in record.h.
absl::StatusOr<RequestRecord> RequestRecordFromJson(const nlohmann::json& j) {
  TP_RETURN_IF_ERROR(RequireObject(j, "a request record"));
  FieldReader f(j, "");
  RequestRecord r;
  RequestOutcome& o = r.outcome;
  TP_RETURN_IF_ERROR(f.Get("seq", kRequired, &r.seq));
  TP_RETURN_IF_ERROR(f.Get("timestamp", kOptional, &r.timestamp));
  TP_RETURN_IF_ERROR(f.Get("send_time_s", kRequired, &r.send_time_s));
  TP_RETURN_IF_ERROR(f.Get("target", kOptional, &r.target));
  TP_RETURN_IF_ERROR(f.Get("concurrency", kRequired, &r.concurrency));
  TP_RETURN_IF_ERROR(f.Get("request_rate", kOptional, &r.request_rate));
  TP_RETURN_IF_ERROR(f.Get("round", kRequired, &r.round));
  TP_RETURN_IF_ERROR(f.Get("expected_prompt_tokens", kOptional, &r.expected_prompt_tokens));
  TP_RETURN_IF_ERROR(f.Get("max_tokens", kOptional, &r.max_tokens));
  TP_RETURN_IF_ERROR(f.Get("success", kRequired, &o.success));
  TP_RETURN_IF_ERROR(f.Get("timeout", kOptional, &o.timeout));
  TP_RETURN_IF_ERROR(f.Get("error", kOptional, &o.error));
  TP_RETURN_IF_ERROR(f.Get("latency_ms", kRequired, &o.latency_ms));
  TP_RETURN_IF_ERROR(f.Get("ttft_ms", kRequired, &o.ttft_ms));
  TP_RETURN_IF_ERROR(f.Get("itl_ms", kOptional, &o.itl_ms));
  TP_RETURN_IF_ERROR(f.Get("prompt_tokens", kOptional, &o.prompt_tokens));
  TP_RETURN_IF_ERROR(f.Get("completion_tokens", kRequired, &o.completion_tokens));
  TP_RETURN_IF_ERROR(f.Get("finish_reason", kOptional, &o.finish_reason));
  TP_RETURN_IF_ERROR(f.Get("server_queue_ms", kOptional, &o.server_queue_ms));
  TP_RETURN_IF_ERROR(f.Get("backend", kOptional, &o.backend));
  TP_RETURN_IF_ERROR(f.Get("prompt_index", kOptional, &r.prompt_index));
  const Json* text = nullptr;
  TP_RETURN_IF_ERROR(f.Find("output_text", kOptional, &text));
  if (text != nullptr) {
    std::string t;
    TP_RETURN_IF_ERROR(f.Get("output_text", kOptional, &t));
    o.output_text = std::move(t);
  }
  const Json* ids = nullptr;
  TP_RETURN_IF_ERROR(f.Find("output_token_ids", kOptional, &ids));
  if (ids != nullptr) {
    if (!ids->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("field \"output_token_ids\" must be an array of integers, got ", ids->type_name()));
    }
    std::vector<int32_t> v;
    for (size_t i = 0; i < ids->size(); ++i) {
      if (!(*ids)[i].is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat("field \"output_token_ids[", i, "]\" must be an integer, got ",
                                                       (*ids)[i].type_name()));
      }
      v.push_back((*ids)[i].get<int32_t>());
    }
    o.output_token_ids = std::move(v);
  }
  return r;
}

nlohmann::json ToJson(const RunRecord& r) {
  Json levels = Json::array();
  for (const LevelRecord& l : r.levels) levels.push_back(ToJson(l));
  Json extra = Json::object();
  for (const auto& [k, v] : r.extra) extra[k] = v;
  return Json{{"run_id", r.run_id},
              {"target", r.target},
              {"api", r.api},
              {"model", r.model},
              {"weights_source", r.weights_source},
              {"engine_version", r.engine_version},
              {"tpbench_version", r.tpbench_version},
              {"dtype", r.dtype},
              {"quantization", r.quantization},
              {"kv_cache_dtype", r.kv_cache_dtype},
              {"driver_version", r.driver_version},
              {"cuda_version", r.cuda_version},
              {"kernels", r.kernels},
              {"speculative_config", r.speculative_config},
              {"gpu_model", r.gpu_model},
              {"gpu_count", r.gpu_count},
              {"nodes", r.nodes},
              {"tp_size", r.tp_size},
              {"pp_size", r.pp_size},
              {"pipeline_stages", r.pipeline_stages},
              {"pipeline_micro_batches", r.pipeline_micro_batches},
              {"max_model_len", r.max_model_len},
              {"max_num_seqs", r.max_num_seqs},
              {"workload", r.workload},
              {"ignore_eos", r.ignore_eos},
              {"load_time_s", r.load_time_s},
              {"warmup_ms", r.warmup_ms},
              {"start_time", r.start_time},
              {"end_time", r.end_time},
              {"levels", std::move(levels)},
              {"extra", std::move(extra)}};
}

// Required: identity (run_id, target, api) and the levels; the environment is optional
// because not every target can report it.
absl::StatusOr<RunRecord> RunRecordFromJson(const nlohmann::json& j) {
  TP_RETURN_IF_ERROR(RequireObject(j, "a run record"));
  FieldReader f(j, "");
  RunRecord r;
  TP_RETURN_IF_ERROR(f.Get("run_id", kRequired, &r.run_id));
  TP_RETURN_IF_ERROR(f.Get("target", kRequired, &r.target));
  TP_RETURN_IF_ERROR(f.Get("api", kRequired, &r.api));
  TP_RETURN_IF_ERROR(f.Get("model", kOptional, &r.model));
  TP_RETURN_IF_ERROR(f.Get("weights_source", kOptional, &r.weights_source));
  TP_RETURN_IF_ERROR(f.Get("engine_version", kOptional, &r.engine_version));
  TP_RETURN_IF_ERROR(f.Get("tpbench_version", kOptional, &r.tpbench_version));
  TP_RETURN_IF_ERROR(f.Get("dtype", kOptional, &r.dtype));
  TP_RETURN_IF_ERROR(f.Get("quantization", kOptional, &r.quantization));
  TP_RETURN_IF_ERROR(f.Get("kv_cache_dtype", kOptional, &r.kv_cache_dtype));
  TP_RETURN_IF_ERROR(f.Get("driver_version", kOptional, &r.driver_version));
  TP_RETURN_IF_ERROR(f.Get("cuda_version", kOptional, &r.cuda_version));
  TP_RETURN_IF_ERROR(f.Get("kernels", kOptional, &r.kernels));
  TP_RETURN_IF_ERROR(f.Get("speculative_config", kOptional, &r.speculative_config));
  TP_RETURN_IF_ERROR(f.Get("gpu_model", kOptional, &r.gpu_model));
  TP_RETURN_IF_ERROR(f.Get("gpu_count", kOptional, &r.gpu_count));
  TP_RETURN_IF_ERROR(f.Get("nodes", kOptional, &r.nodes));
  TP_RETURN_IF_ERROR(f.Get("tp_size", kOptional, &r.tp_size));
  TP_RETURN_IF_ERROR(f.Get("pp_size", kOptional, &r.pp_size));
  TP_RETURN_IF_ERROR(f.Get("pipeline_stages", kOptional, &r.pipeline_stages));
  TP_RETURN_IF_ERROR(f.Get("pipeline_micro_batches", kOptional, &r.pipeline_micro_batches));
  TP_RETURN_IF_ERROR(f.Get("max_model_len", kOptional, &r.max_model_len));
  TP_RETURN_IF_ERROR(f.Get("max_num_seqs", kOptional, &r.max_num_seqs));
  TP_RETURN_IF_ERROR(f.Get("workload", kOptional, &r.workload));
  TP_RETURN_IF_ERROR(f.Get("ignore_eos", kOptional, &r.ignore_eos));
  TP_RETURN_IF_ERROR(f.Get("load_time_s", kOptional, &r.load_time_s));
  TP_RETURN_IF_ERROR(f.Get("warmup_ms", kOptional, &r.warmup_ms));
  TP_RETURN_IF_ERROR(f.Get("start_time", kOptional, &r.start_time));
  TP_RETURN_IF_ERROR(f.Get("end_time", kOptional, &r.end_time));

  const Json* levels = nullptr;
  TP_RETURN_IF_ERROR(f.Find("levels", kRequired, &levels));
  if (!levels->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("field \"levels\" must be an array, got ", levels->type_name()));
  }
  for (size_t i = 0; i < levels->size(); ++i) {
    TP_ASSIGN_OR_RETURN(LevelRecord l,
                        LevelFromJson((*levels)[i], absl::StrCat("levels[", i, "]")));
    r.levels.push_back(std::move(l));
  }

  const Json* extra = nullptr;
  TP_RETURN_IF_ERROR(f.Find("extra", kOptional, &extra));
  if (extra != nullptr) {
    TP_RETURN_IF_ERROR(RequireObject(*extra, "field \"extra\""));
    for (const auto& [k, v] : extra->items()) {
      if (!v.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "field \"extra.", k, "\" must be a string, got ", v.type_name(), " ", v.dump()));
      }
      r.extra[k] = v.get<std::string>();
    }
  }
  return r;
}

absl::StatusOr<std::vector<RequestRecord>> ReadRequestRecords(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open request records file ", path));
  std::vector<RequestRecord> records;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json j = Json::parse(line, /*cb=*/nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": not valid JSON (each line must be one object)"));
    }
    absl::StatusOr<RequestRecord> r = RequestRecordFromJson(j);
    if (!r.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": ", r.status().message()));
    }
    records.push_back(*std::move(r));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return records;
}

absl::StatusOr<RunRecord> ReadRunRecord(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  Json j = Json::parse(*text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  }
  absl::StatusOr<RunRecord> r = RunRecordFromJson(j);
  if (!r.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", r.status().message()));
  return r;
}

}  // namespace tpserve::bench
