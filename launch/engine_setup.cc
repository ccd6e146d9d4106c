// Engine start-up: model resolution, shard loading, KV sizing. Tested by
// tests/model_test.cc and tests/cli_test.sh.
#include "launch/engine_setup.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "coordinator/kv_split.h"

namespace tpserve {

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  std::string t = absl::AsciiStrToLower(text);
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(t, &pos);
  } catch (...) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a size (e.g. 512MiB, 2GiB)"));
  }
  std::string unit = t.substr(pos);
  double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1024.0;
  else if (unit == "kb") mult = 1e3;
  else if (unit == "m" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "mb") mult = 1e6;
  else if (unit == "g" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "gb") mult = 1e9;
  else return absl::InvalidArgumentError(absl::StrCat("\"", text, "\": unknown size unit \"", unit, "\""));
  if (!(v >= 0) || !std::isfinite(v)) return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a size"));
  return static_cast<int64_t>(v * mult);
}

absl::StatusOr<ModelConfig> ResolveModelConfig(const EngineOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (o.model.empty()) return absl::InvalidArgumentError("--model is required (a checkpoint directory or a built-in model)");
  if (fs::is_directory(o.model, ec)) return LoadModelConfig(o.model);
  auto preset = PresetModelConfig(o.model);
  if (preset.ok()) {
    if (o.load_format != "dummy") {
      return absl::InvalidArgumentError(absl::StrCat("\"", o.model, "\" is a built-in model shape without weights; ",
                                                     "add --load-format dummy"));
    }
    return preset;
  }
  return absl::NotFoundError(absl::StrCat("--model \"", o.model, "\" is neither a directory nor a built-in model (",
                                          preset.status().message(), ")"));
}

namespace {

absl::StatusOr<Engine> StartLocal(absl::StatusOr<ModelConfig> config, const EngineOptions& o,
                                  const WorldConfig& world, Communicator& comm) {
  Engine e;
  TP_ASSIGN_OR_RETURN(e.config, std::move(config));
  if (o.max_model_len > 0) {
    if (o.max_model_len > e.config.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("--max-model-len ", o.max_model_len, " exceeds the model's ",
                                                     e.config.max_position_embeddings, " positions"));
    }
    e.config.max_position_embeddings = o.max_model_len;
  }
  ModelOptions mo;
  mo.block_size = o.block_size;
  if (o.dtype != "auto") {
    TP_ASSIGN_OR_RETURN(DType d, ParseDType(o.dtype));
    mo.weight_dtype = d;
  }
  if (o.load_format == "dummy") {
    e.source = MakeDummySource(e.config, o.dummy_seed);
  } else if (o.load_format == "auto" || o.load_format == "safetensors") {
    TP_ASSIGN_OR_RETURN(e.source, OpenCheckpointSource(o.model));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--load-format \"", o.load_format,
                                                   "\" is not one of auto, safetensors, dummy"));
  }
  e.weights_description = e.source->Describe();
  BackendOptions bo;
  bo.threads = o.threads;
  if (bo.threads <= 0) {
    // Ranks on one node share its cores.
    bo.threads = std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(std::max(1, world.local_size)));
  }
  e.backend = MakeCpuBackend(bo);
  TP_ASSIGN_OR_RETURN(e.model, Model::Load(e.config, *e.source, *e.backend, comm, mo));
  return e;
}

// Blocks per KV group from this rank's budget (kv_split.h has the rule).
std::vector<int64_t> LocalKvBlocks(const EngineOptions& o, const Engine& e) {
  const std::vector<int64_t> per_block = e.model->KvBytesPerBlock();
  if (!o.split_kv_by_need) {
    int64_t sum = 0;
    for (int64_t b : per_block) sum += b;
    return std::vector<int64_t>(per_block.size(), o.kv_cache_bytes / std::max<int64_t>(sum, 1));
  }
  KvSplitInputs in;
  in.budget_bytes = o.kv_cache_bytes;
  in.bytes_per_block = per_block;
  in.windows = e.config.kv_group_windows;
  in.block_size = e.model->block_size();
  in.max_model_len = e.config.max_position_embeddings;
  in.max_num_batched_tokens = o.max_num_batched_tokens;
  return SplitKvBlocks(in);
}

absl::StatusOr<Engine> StartWith(absl::StatusOr<ModelConfig> config, const EngineOptions& o,
                                 const WorldConfig& world, Communicator& comm) {
  const auto t0 = std::chrono::steady_clock::now();
  auto local = StartLocal(std::move(config), o, world, comm);
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(local.status()));
  Engine e = std::move(local).value();
  // Each group takes the smallest count across ranks, so no rank exceeds its budget.
  std::vector<int64_t> blocks = LocalKvBlocks(o, e);
  absl::Status kv = absl::OkStatus();
  for (size_t g = 0; g < blocks.size(); ++g) {
    blocks[g] = comm.AllReduceMin(blocks[g]);
    if (blocks[g] < 1 && kv.ok()) {
      kv = absl::ResourceExhaustedError(absl::StrCat(
          "the KV cache budget (", o.kv_cache_bytes, " bytes per rank) leaves KV group ", g, " (window ",
          e.config.kv_group_windows[g], ") no block of ", e.model->KvBytesPerBlock()[g],
          " bytes; raise --kv-cache-memory"));
    }
  }
  if (kv.ok()) kv = e.model->AllocateKvCache(blocks);
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(kv));
  e.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

}  // namespace

absl::StatusOr<Engine> StartEngine(const EngineOptions& o, const WorldConfig& world, Communicator& comm) {
  return StartWith(ResolveModelConfig(o), o, world, comm);
}

absl::StatusOr<Engine> StartEngine(const ModelConfig& config, const EngineOptions& o, const WorldConfig& world,
                                   Communicator& comm) {
  return StartWith(config, o, world, comm);
}

}  // namespace tpserve
