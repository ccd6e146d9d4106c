// Engine start-up: model resolution, device and communicator, shard loading, KV sizing.
// Tested by tests/model_test.cc, tests/device_choice_test.cc, tests/cli_test.sh and (GPU)
// tests/cuda_engine_test.cc.
#include "launch/engine_setup.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "coordinator/api/process_info.h"
#include "coordinator/engine/block_manager.h"
#include "coordinator/engine/kv_split.h"
#include "worker/device.h"
#include "worker/gguf_model.h"
#include "worker/host_memory.h"
#include "worker/memory_planner.h"

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

namespace {
// The options' GGUF file, or the one --model names opened now; null where the model is not GGUF.
absl::StatusOr<std::shared_ptr<const GgufFile>> GgufFileOf(const EngineOptions& o) {
  if (o.gguf != nullptr) return o.gguf;
  return OpenGgufModel(o.model, o.load_format);
}
}  // namespace

absl::StatusOr<ModelConfig> ResolveModelConfig(const EngineOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (o.model.empty()) return absl::InvalidArgumentError("--model is required (a checkpoint directory or a built-in model)");
  TP_ASSIGN_OR_RETURN(std::shared_ptr<const GgufFile> gguf, GgufFileOf(o));
  if (gguf != nullptr) return GgufModelConfig(*gguf);
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

WarmupStep MakeWarmupStep(int64_t tokens, int64_t max_len, int32_t block_size, size_t kv_groups,
                          int64_t logit_rows) {
  WarmupStep w;
  tokens = std::max<int64_t>(tokens, 1);
  const int64_t seq_len = std::clamp<int64_t>(max_len, 1, tokens);
  const int64_t num_seqs = (tokens + seq_len - 1) / seq_len;
  const int64_t blocks_per_seq = (seq_len + block_size - 1) / block_size;
  w.blocks = num_seqs * blocks_per_seq;
  StepPlan& p = w.plan;
  p.num_seqs = static_cast<int32_t>(num_seqs);
  KvGroupPlan kv;
  kv.max_blocks_per_seq = static_cast<int32_t>(blocks_per_seq);
  for (int64_t b = 0; b < w.blocks; ++b) kv.block_tables.push_back(static_cast<int32_t>(b));
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t seq = t / seq_len, pos = t % seq_len;
    p.token_ids.push_back(0);
    p.positions.push_back(static_cast<int32_t>(pos));
    p.token_seq.push_back(static_cast<int32_t>(seq));
    kv.slot_mapping.push_back(static_cast<int32_t>((seq * blocks_per_seq + pos / block_size) * block_size +
                                                   pos % block_size));
  }
  const int64_t rows = std::clamp<int64_t>(logit_rows, 1, tokens);
  for (int64_t r = 0; r < rows; ++r) p.logit_rows.push_back(static_cast<int32_t>(r));
  // Sampled on the workers, as serving does on a GPU, so that the sampling buffers exist
  // before the memory is measured.
  RowSampling greedy;
  greedy.temperature = 0.0f;
  p.sampling.assign(rows, greedy);
  p.penalty_offsets.assign(rows + 1, 0);
  p.kv.assign(kv_groups, kv);
  return w;
}

std::vector<int32_t> EngineCudaGraphBatchSizes(const EngineOptions& o, DeviceKind device) {
  if (device != DeviceKind::kCuda || o.enforce_eager) return {};
  std::vector<int32_t> sizes =
      o.cuda_graph_batch_sizes.empty() ? DefaultCudaGraphBatchSizes(o.max_num_seqs) : o.cuda_graph_batch_sizes;
  // A decode step has a token per sequence: never more than a step's tokens.
  const int32_t cap = std::max<int32_t>(o.max_num_batched_tokens, 1);
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](int32_t b) { return b > cap; }), sizes.end());
  return sizes;
}

absl::StatusOr<cpu::KvCacheDType> KvCacheDTypeFor(const std::string& spec, DeviceKind device) {
  const bool cuda = device == DeviceKind::kCuda;
  if (spec == "auto" || spec.empty()) return cpu::KvCacheDType::kF32;  // as the activations
  if (spec == "bfloat16") return cuda ? cpu::KvCacheDType::kF32 : cpu::KvCacheDType::kBf16;  // cuda's is bf16
  if (spec == "fp8" || spec == "fp8_e4m3") {
    if (cuda) {
      return absl::InvalidArgumentError(absl::StrCat("--kv-cache-dtype ", spec,
                                                     " runs on the CPU backend only: the CUDA attention kernels read "
                                                     "a bf16 cache (use auto or bfloat16 there)"));
    }
    return cpu::KvCacheDType::kFp8E4M3;
  }
  return absl::InvalidArgumentError(absl::StrCat("--kv-cache-dtype \"", spec,
                                                 "\" is not supported: auto, bfloat16, fp8, fp8_e4m3 (fp8_e5m2 and "
                                                 "the other fp8 variants are not implemented)"));
}

namespace {

// Options, model config, device and weight source on this rank; no collectives.
absl::Status PrepareLocal(absl::StatusOr<ModelConfig> config, const EngineOptions& o, Engine& e) {
  TP_ASSIGN_OR_RETURN(e.config, std::move(config));
  if (o.max_model_len > 0) {
    if (o.max_model_len > e.config.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat("--max-model-len ", o.max_model_len, " exceeds the model's ",
                                                     e.config.max_position_embeddings, " positions"));
    }
    e.config.max_position_embeddings = o.max_model_len;
  }
  if (o.dtype != "auto") TP_RETURN_IF_ERROR(ParseDType(o.dtype).status());
  TP_RETURN_IF_ERROR(ValidateGpuMemoryUtilization(o.gpu_memory_utilization));
  TP_ASSIGN_OR_RETURN(e.device, ChooseDevice(o.device, BuiltWithCuda(), CudaDeviceCount()));
  TP_RETURN_IF_ERROR(KvCacheDTypeFor(o.kv_cache_dtype, e.device).status());
  if (o.load_format == "dummy") {
    e.source = MakeDummySource(e.config, o.dummy_seed);
  } else if (o.load_format == "gguf" || (o.load_format == "auto" && IsGgufModelPath(o.model))) {
    TP_ASSIGN_OR_RETURN(std::shared_ptr<const GgufFile> gguf, GgufFileOf(o));
    TP_ASSIGN_OR_RETURN(e.source, OpenGgufSource(std::move(gguf)));
  } else if (o.load_format == "auto" || o.load_format == "safetensors") {
    TP_ASSIGN_OR_RETURN(e.source, OpenCheckpointSource(o.model));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--load-format \"", o.load_format,
                                                   "\" is not one of auto, safetensors, gguf, dummy"));
  }
  if (o.quantization == "int8" || o.quantization == "fp8") {
    if (o.dequantize_weights) {
      return absl::InvalidArgumentError(
          absl::StrCat("--quantization ", o.quantization, " and --dequantize-weights contradict each other"));
    }
    if (e.device != DeviceKind::kCpu) {
      return absl::InvalidArgumentError(absl::StrCat("--quantization ", o.quantization,
                                                     " runs on the CPU backend only: the CUDA backend has no "
                                                     "quantized kernels yet"));
    }
    e.source = QuantizeAtLoad(std::move(e.source), o.quantization == "int8" ? DType::kQ8_0 : DType::kF8_E4M3);
  } else if (!o.quantization.empty() && o.quantization != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantization \"", o.quantization, "\" is not one of none, int8, fp8"));
  }
  e.weights_description = e.source->Describe();
  return absl::OkStatus();
}

// This rank's backend: the CPU's cores shared by the node's ranks, or its GPU.
absl::Status MakeBackend(const EngineOptions& o, const WorldConfig& world, Engine& e) {
  if (e.device == DeviceKind::kCuda) {
    e.gpu = GpuForLocalRank(world.local_rank, CudaDeviceCount());
    TP_ASSIGN_OR_RETURN(e.backend, MakeCudaEngineBackend(BackendOptions{.device = e.gpu, .kernels = o.kernels}));
  } else {
    BackendOptions bo;
    TP_ASSIGN_OR_RETURN(const cpu::GemmChoice gemm, cpu::ChooseGemmPath(o.cpu_gemm, o.cpu_quant_prefill));
    bo.cpu_gemm = gemm.path;
    bo.cpu_quant_prefill = gemm.quant_prefill;
    e.cpu_gemm = gemm;
    const ThpMode thp = ReadThpMode();
    bo.cpu_huge_pages = o.cpu_huge_pages && ThpModeAllowsHugePages(thp);
    e.cpu_huge_pages = DescribeHugePages(o.cpu_huge_pages, thp);
    const int node_cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    const CpuThreads threads =
        ChooseCpuThreads(o.threads, node_cores, world.local_size, AllowedCores(node_cores));
    bo.threads = threads.threads;
    e.cpu_threads_note = threads.note;
    e.backend = MakeCpuBackend(bo);
  }
  if (o.wrap_backend) e.backend = o.wrap_backend(std::move(e.backend));
  return absl::OkStatus();
}

// The communicator the model's collectives go through: the caller's on the CPU and for one
// rank; on GPUs NCCL if every rank can have it, else staged through pinned memory.
// Collective; returns the same error on every rank.
absl::StatusOr<Communicator*> SetUpTpCommunicator(const WorldConfig& world, Communicator& comm, Engine& e) {
  if (e.device != DeviceKind::kCuda) return &comm;
  const TpCommKind mine = ChooseTpCommunicator(comm.size(), world.local_size, CudaDeviceCount(), BuiltWithNccl());
  if (mine == TpCommKind::kHost) return &comm;
  // NCCL only where every rank can run it (nodes may differ).
  const bool nccl = comm.AllReduceMin(mine == TpCommKind::kNccl ? 1 : 0) == 1;
  e.tp_comm = nccl ? TpCommKind::kNccl : TpCommKind::kStaged;
  auto made = MakeCudaTpCommunicator(nccl, comm, *e.backend);
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(made.status()));
  e.device_comm = std::move(made).value();
  return e.device_comm.get();
}

// The MTP drafter from --speculative-config's "model" (a directory, or with --load-format
// dummy a built-in assistant shape that is not one), checked against the target, with its
// step buffers for max_num_seqs sequences. No collectives but the load's.
absl::StatusOr<std::unique_ptr<MtpDrafter>> OpenDrafter(const EngineOptions& o, Communicator& model_comm,
                                                        Engine& e) {
  const std::string& dir = o.speculative.model;
  std::error_code ec;
  absl::StatusOr<MtpDrafterConfig> preset = PresetMtpDrafterConfig(dir);
  if (std::filesystem::is_directory(dir, ec) || !preset.ok()) {
    return MtpDrafter::LoadDir(dir, *e.model, *e.backend, model_comm);
  }
  if (o.load_format != "dummy") {
    return absl::InvalidArgumentError(
        "a built-in assistant shape without weights; add --load-format dummy, or give an assistant directory");
  }
  return MtpDrafter::Load(*preset, *MakeDummySource(preset->text, o.dummy_seed), *e.model, *e.backend, model_comm);
}

absl::Status LoadDrafter(const EngineOptions& o, Communicator& model_comm, Engine& e) {
  const std::string& dir = o.speculative.model;
  absl::StatusOr<std::unique_ptr<MtpDrafter>> drafter = OpenDrafter(o, model_comm, e);
  absl::Status st = drafter.status();
  if (st.ok()) {
    e.drafter = std::move(drafter).value();
    st = e.drafter->ReserveScratch(std::max<int32_t>(o.max_num_seqs, 1));
  }
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat("--speculative-config \"model\" \"", dir,
                                              "\" (the MTP drafter): ", st.message()));
}

// Logit rows a step has at most: one per sequence, K + 1 per sequence verifying K drafts.
int64_t MaxLogitRows(const EngineOptions& o) {
  const int64_t per_seq = 1 + (o.speculative.enabled() ? o.speculative.num_speculative_tokens : 0);
  return std::max<int64_t>(o.max_num_seqs, 1) * per_seq;
}

// This rank's KV budget on a GPU: a warm-up step at the largest step size first (scratch,
// attention workspace and cuBLASLt plans allocated, so the measurement counts them), then
// the memory planner on what is left, minimum over ranks. Collective.
absl::StatusOr<int64_t> PlanGpuKvBudget(const EngineOptions& o, const WorldConfig& world, Communicator& comm,
                                        Engine& e) {
  Model& m = *e.model;
  const int64_t tokens = std::max<int32_t>(o.max_num_batched_tokens, 1);
  const WarmupStep warm = MakeWarmupStep(tokens, e.config.max_position_embeddings, m.block_size(),
                                         e.config.kv_group_windows.size(), MaxLogitRows(o));
  absl::Status st = m.AllocateKvCache(warm.blocks);
  if (st.ok()) st = m.ReserveScratch(tokens, static_cast<int64_t>(warm.plan.logit_rows.size()));
  if (!st.ok()) {
    st = absl::Status(st.code(), absl::StrCat("the warm-up step of --max-num-batched-tokens ", tokens,
                                              " tokens does not fit after the weights: ", st.message()));
  }
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(st));
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(m.Forward(warm.plan, nullptr).status()));
  // CUDA graphs: their buffers (scratch, block tables and attention workspace for the
  // largest size at the fixed block-table width) stay allocated and count as in use below;
  // the graphs themselves are captured now, over the warm-up KV cache, only to measure
  // what they hold. FreeKvCache drops them and the model captures them again on first use
  // over the real KV cache, into the room graph_pool_bytes keeps. Capturing after the KV
  // allocation without that room could run out of memory mid-serving.
  int64_t graph_bytes = 0;
  if (m.cuda_graphs()) {
    auto agree = [&](absl::Status gs) {
      if (!gs.ok()) {
        gs = absl::Status(gs.code(), absl::StrCat("capturing the decode steps' CUDA graphs: ", gs.message(),
                                                  " (--enforce-eager runs without them)"));
      }
      return comm.AgreeOnStatus(gs);
    };
    // Agreed before capturing: the captured steps hold all-reduces, so every rank captures
    // or none does.
    absl::Status gs = m.ReserveGraphBuffers();
    e.backend->Synchronize();
    absl::StatusOr<DeviceMemoryInfo> before = CudaDeviceMemory(e.gpu);
    if (gs.ok()) gs = before.status();
    TP_RETURN_IF_ERROR(agree(gs));
    gs = m.CaptureCudaGraphs();
    e.backend->Synchronize();
    absl::StatusOr<DeviceMemoryInfo> after = CudaDeviceMemory(e.gpu);
    if (gs.ok()) gs = after.status();
    if (gs.ok()) graph_bytes = std::max<int64_t>(0, before->free_bytes - after->free_bytes);
    TP_RETURN_IF_ERROR(agree(gs));
  }
  m.FreeKvCache();
  e.backend->Synchronize();
  comm.Barrier();  // every rank on the GPU has loaded, warmed up and freed its warm-up KV
  absl::StatusOr<DeviceMemoryInfo> mem = CudaDeviceMemory(e.gpu);
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(mem.status()));
  KvMemoryInputs in;
  in.gpu_memory_utilization = o.gpu_memory_utilization;
  in.total_bytes = mem->total_bytes;
  in.free_bytes = mem->free_bytes;
  in.ranks_sharing_device = RanksSharingGpu(world.local_rank, world.local_size, CudaDeviceCount());
  in.activation_bytes = 0;  // the warm-up step allocated them: already in use
  in.graph_pool_bytes = graph_bytes;  // measured above, freed since
  in.kv_bytes_per_block = m.KvBytesPerBlock();
  TP_ASSIGN_OR_RETURN(KvMemoryPlan plan, PlanKvMemoryAcrossRanks(comm, in));
  return plan.budget_bytes;
}

// Blocks per KV group from this rank's budget (kv_split.h has the rule).
std::vector<int64_t> LocalKvBlocks(const EngineOptions& o, const Engine& e, int64_t budget_bytes) {
  const std::vector<int64_t> per_block = e.model->KvBytesPerBlock();
  if (!o.split_kv_by_need) {
    int64_t sum = 0;
    for (int64_t b : per_block) sum += b;
    return std::vector<int64_t>(per_block.size(), budget_bytes / std::max<int64_t>(sum, 1));
  }
  KvSplitInputs in;
  in.budget_bytes = budget_bytes;
  in.bytes_per_block = per_block;
  in.windows = e.config.kv_group_windows;
  if (e.drafter != nullptr) {
    // The scheduler frees a sliding group's blocks as a window kMtpDrafterLookback wider
    // would (the drafter reads further back): size the groups for that.
    for (int32_t& w : in.windows) w = w > 0 ? w + kMtpDrafterLookback : 0;
  }
  in.block_size = e.model->block_size();
  in.max_model_len = e.config.max_position_embeddings;
  in.max_num_batched_tokens = o.max_num_batched_tokens;
  return SplitKvBlocks(in);
}

absl::StatusOr<Engine> StartWith(absl::StatusOr<ModelConfig> config, const EngineOptions& o,
                                 const WorldConfig& world, Communicator& comm) {
  const auto t0 = std::chrono::steady_clock::now();
  const ProcessMemory before = ReadProcessMemory();
  Engine e;
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(PrepareLocal(std::move(config), o, e)));
  // `--device auto` may see GPUs on one node and none on another: all ranks take the CPU then.
  if (comm.AllReduceMin(e.device == DeviceKind::kCuda ? 1 : 0) == 0) e.device = DeviceKind::kCpu;
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(MakeBackend(o, world, e)));
  // Pipeline stages: each stage's ranks form its tensor-parallel group; the world keeps the
  // agreements, the step plans and the transfers between stages.
  Communicator* tp_comm = &comm;
  if (world.pp_size > 1) {
    absl::Status st = o.speculative.method == SpeculativeConfig::Method::kMtp
                          ? absl::UnimplementedError("the MTP drafter (--speculative-config {\"method\": \"mtp\"}) "
                                                     "does not run with pipeline stages yet; use "
                                                     "--pipeline-parallel-size 1 or the \"ngram\" method")
                          : absl::OkStatus();
    if (st.ok()) {
      auto bounds = SplitLayers(e.config, world.pp_size);
      st = bounds.status();
      if (st.ok()) {
        e.stage_bounds = *bounds;
        e.stage = PipelineStage{world.pp_size, world.stage(), e.stage_bounds[world.stage()],
                                e.stage_bounds[world.stage() + 1]};
      }
    }
    TP_RETURN_IF_ERROR(comm.AgreeOnStatus(st));
    e.stage_comm = comm.Split(world.stage());
    tp_comm = e.stage_comm.get();
  } else {
    e.stage = PipelineStage{1, 0, 0, e.config.num_layers};
    e.stage_bounds = {0, e.config.num_layers};
  }
  absl::StatusOr<Communicator*> device_comm = SetUpTpCommunicator(world, *tp_comm, e);
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(device_comm.status()));
  Communicator* model_comm = *device_comm;
  ModelOptions mo;
  mo.pipeline = e.stage;
  mo.block_size = o.block_size;
  if (o.dtype != "auto") mo.weight_dtype = ParseDType(o.dtype).value();
  mo.keep_quantized = !o.dequantize_weights;
  mo.kv_cache_dtype = KvCacheDTypeFor(o.kv_cache_dtype, e.device).value();  // checked in PrepareLocal
  mo.cuda_graph_batch_sizes = EngineCudaGraphBatchSizes(o, e.device);
  mo.max_model_len = static_cast<int32_t>(e.config.max_position_embeddings);
  // On the CPU the MLP runs a chunk of tokens at a time, which bounds its activations. oneDNN's
  // bf16 matmul reads the weights as they are: 128 tokens (a 512-token prefill of gemma-4-1b
  // holds 12 MiB of MLP activations, not 48) cost nothing measurable. The sgemm path widens
  // every weight panel to fp32 once per call, so a smaller chunk widens the weights more
  // often: 128 tokens cost 13-15% of its prefill against 512, 256 tokens 5% (gemma-4-1b's
  // peak RSS 1.103x its weights at 256 after a 512-token prompt and 64 decode steps, 1.10x at
  // 128; docs/cpu_backend.md, "Memory = model size" and "An AVX2-only CPU, emulated").
  if (e.device == DeviceKind::kCpu) {
    mo.mlp_chunk_tokens = e.cpu_gemm.path == cpu::GemmPath::kSgemm ? 256 : 128;
    // Block-quantized weights are widened panel by panel inside every GEMM: a 512-token
    // prompt in 128-token chunks widened the MLP's blocks 4 times (Llama-3.2-1B Q4_K_M
    // prefill 103-108 tok/s against 176 for the file widened at load, docs/quantization.md).
    // The int8 prefill widens nothing, so it keeps mlp_chunk_tokens (Backend::PrefillWidens):
    // on the EPYC VM the 1B Q4_K_M with --cpu-quant-prefill int8 in 128-token chunks against 512,
    // 3 rounds alternated, prefilled 512 tokens in 3.8-4.3 s against 4.2-4.7 s and peaked 26 MiB
    // lower (867 against 893 MiB; docs/results/2026-12-08-int8-prefill-epyc/).
    mo.quantized_mlp_chunk_tokens = 512;
  }
  auto model = Model::Load(e.config, *e.source, *e.backend, *model_comm, mo, &comm);
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(model.status()));
  e.model = std::move(model).value();
  if (o.speculative.method == SpeculativeConfig::Method::kMtp) {
    // Before the KV planning, so that a GPU's free memory counts its weights and buffers.
    absl::Status loaded = LoadDrafter(o, *model_comm, e);
    TP_RETURN_IF_ERROR(comm.AgreeOnStatus(loaded));
  }

  const bool gpu = e.device == DeviceKind::kCuda;
  if (gpu && (o.kernels.tuned || o.tune_kernels)) {
    // Before the warm-up step, which then builds the tuned GEMM plans, and before the KV
    // planning measures free memory (the tuning's buffers are freed by then). Ranks that
    // share a GPU take turns, so that none times its kernels beside another's: turn t is
    // every GPU's t-th rank; every rank runs the agreed number of turns.
    const int devices = CudaDeviceCount();
    const int my_turn = TurnOnGpu(world.local_rank, devices);
    const int sharing = RanksSharingGpu(world.local_rank, world.local_size, devices);
    const int turns = static_cast<int>(comm.AllReduceMax(sharing));  // the most ranks on one GPU
    absl::Status tuned = absl::OkStatus();
    for (int turn = 0; turn < turns; ++turn) {
      if (turn == my_turn) {
        auto report = e.model->TuneKernels(std::max<int32_t>(o.max_num_batched_tokens, 1),
                                           std::min<int64_t>(MaxLogitRows(o), std::max<int32_t>(o.max_num_batched_tokens, 1)));
        if (report.ok()) {
          e.tune_report = std::move(report).value();
        } else {
          tuned = report.status();
        }
      }
      if (turns > 1) comm.Barrier();
    }
    TP_RETURN_IF_ERROR(comm.AgreeOnStatus(tuned));
  }
  if (gpu) {
    TP_ASSIGN_OR_RETURN(e.kv_budget_bytes, PlanGpuKvBudget(o, world, comm, e));
    // Distinct GPUs over all nodes: each node's first rank counts its own.
    const int32_t mine = world.local_rank == 0 ? GpusInUseOnNode(world.local_size, CudaDeviceCount()) : 0;
    std::vector<int32_t> all(comm.size());
    comm.AllGather(&mine, sizeof(mine), all.data());
    for (int32_t n : all) e.gpus_in_use += n;
  } else {
    e.kv_budget_bytes = o.kv_cache_bytes;
  }
  // Each group takes the smallest count across ranks, so no rank exceeds its budget. Slots
  // are int32 in step plans: a tiny model on a large GPU must not overflow them.
  std::vector<int64_t> blocks = LocalKvBlocks(o, e, e.kv_budget_bytes);
  const int64_t max_blocks = std::numeric_limits<int32_t>::max() / std::max<int64_t>(e.model->block_size(), 1);
  // A group none of this stage's layers is in costs it nothing: the other stages decide.
  const std::vector<int64_t> per_block = e.model->KvBytesPerBlock();
  for (size_t g = 0; g < blocks.size(); ++g) {
    if (per_block[g] == 0) blocks[g] = max_blocks;
  }
  absl::Status kv = absl::OkStatus();
  for (size_t g = 0; g < blocks.size(); ++g) {
    blocks[g] = comm.AllReduceMin(std::min(blocks[g], max_blocks));
    if (blocks[g] < 1 && kv.ok()) {
      kv = absl::ResourceExhaustedError(absl::StrCat(
          "the KV cache budget (", e.kv_budget_bytes, " bytes per rank) leaves KV group ", g, " (window ",
          e.config.kv_group_windows[g], ") no block of ", e.model->KvBytesPerBlock()[g], " bytes; ",
          gpu ? "raise --gpu-memory-utilization or use more GPUs" : "raise --kv-cache-memory"));
    }
  }
  if (kv.ok()) kv = e.model->AllocateKvCache(blocks);
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(kv));
  e.kv_cache_dtype = mo.kv_cache_dtype != cpu::KvCacheDType::kF32 ? cpu::KvCacheDTypeName(mo.kv_cache_dtype)
                     : gpu                                         ? "bf16"
                                                                   : "fp32";
  {
    // Rank 0's: the blocks per group, their bytes, and what fp32 would fit in those bytes.
    int64_t bytes = 0;
    for (size_t g = 0; g < blocks.size(); ++g) {
      if (per_block[g] > 0) bytes += blocks[g] * per_block[g];
    }
    e.kv_cache_note = absl::StrCat(e.kv_cache_dtype, mo.kv_cache_dtype == cpu::KvCacheDType::kFp8E4M3
                                                         ? " (E4M3 codes, an fp32 scale per token and KV head)" : "",
                                   ", blocks per group ", absl::StrJoin(blocks, "/"), ", ",
                                   absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / 1048576.0), " on rank 0");
    if (mo.kv_cache_dtype != cpu::KvCacheDType::kF32) {
      const std::vector<int64_t> fp32 = e.model->KvBytesPerBlock(cpu::KvCacheDType::kF32);
      std::vector<int64_t> as_fp32;
      for (size_t g = 0; g < blocks.size(); ++g) {
        if (per_block[g] > 0) as_fp32.push_back(blocks[g] * per_block[g] / fp32[g]);
      }
      absl::StrAppend(&e.kv_cache_note, "; as fp32 the same memory holds ", absl::StrJoin(as_fp32, "/"), " blocks");
    }
  }
  e.model->FitGraphsToKvCache();  // same blocks on every rank: same width
  // The graphs' buffers at that width, now rather than at the first decode step: the
  // attention workspace is not monotonic in the width, and growing it mid-serving, after
  // the KV cache took the memory, could fail on one rank alone.
  TP_RETURN_IF_ERROR(comm.AgreeOnStatus(e.model->ReserveGraphBuffers()));
  RankMemory mine;
  mine.weight_bytes = e.model->weight_bytes() + (e.drafter ? e.drafter->weight_bytes() : 0);
  mine.rss_before_load_bytes = before.rss_bytes;
  mine.peak_rss_after_load_bytes = ReadProcessMemory().peak_rss_bytes;
  mine.process_key = std::hash<std::string>()(world.node) ^ static_cast<uint64_t>(getpid());
  e.rank_memory.resize(comm.size());
  comm.AllGather(&mine, sizeof(mine), e.rank_memory.data());
  for (RankMemory& m : e.rank_memory) {
    for (const RankMemory& other : e.rank_memory) {
      if (other.process_key == m.process_key) m.process_weight_bytes += other.weight_bytes;
    }
  }
  e.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

}  // namespace

std::string DescribeTuning(const TuneReport& r) {
  if (r.products == 0) return "";
  return absl::StrCat("kernels tuned: ", r.products, " product shapes timed in ", absl::StrFormat("%.1f", r.seconds),
                      " s, ", r.changed, " faster than the default kernel");
}

std::string DescribeLoadMemory(const Engine& e) {
  const auto mib = [](int64_t b) { return absl::StrFormat("%.0f MiB", b / 1048576.0); };
  std::string out;
  const auto& all = e.rank_memory;
  for (size_t r = 0; r < all.size(); ++r) {
    size_t last = r;  // thread ranks of one process are consecutive
    while (last + 1 < all.size() && all[last + 1].process_key == all[r].process_key) ++last;
    const RankMemory& m = all[r];
    const std::string who = last == r ? absl::StrCat("rank ", r) : absl::StrCat("ranks ", r, "-", last, " (one process)");
    // On a GPU the weights are in device memory: the resident set is the host's own share.
    const std::string ratio =
        e.device != DeviceKind::kCpu || m.process_weight_bytes <= 0
            ? ""
            : absl::StrFormat("%.2fx; ", static_cast<double>(m.peak_rss_after_load_bytes) / m.process_weight_bytes);
    absl::StrAppend(&out, out.empty() ? "" : "; ", who, ": weights ", mib(m.process_weight_bytes),
                    e.device != DeviceKind::kCpu ? " on the GPU" : "", ", peak RSS after load ",
                    mib(m.peak_rss_after_load_bytes), " (", ratio, mib(m.rss_before_load_bytes), " before load)");
    r = last;
  }
  return out;
}

absl::StatusOr<Engine> StartEngine(const EngineOptions& o, const WorldConfig& world, Communicator& comm) {
  return StartWith(ResolveModelConfig(o), o, world, comm);
}

absl::StatusOr<Engine> StartEngine(const ModelConfig& config, const EngineOptions& o, const WorldConfig& world,
                                   Communicator& comm) {
  return StartWith(config, o, world, comm);
}

}  // namespace tpserve
