// `tpserve serve`. Tested by tests/serve_test.sh, tests/serve_signal_test.sh and (a rank
// that dies) tests/serve_rank_death_test.sh.
#include "launch/serve_command.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/text/chat_template_loader.h"
#include "coordinator/api/frontend_metrics.h"
#include "coordinator/api/grpc_server.h"
#include "coordinator/api/http_server.h"
#include "coordinator/api/process_info.h"
#include "coordinator/engine/generation_defaults.h"
#include "coordinator/engine/serving_engine.h"
#include "coordinator/text/tokenizer.h"
#include "launch/model_text.h"
#include "launch/port_file.h"
#include "launch/rank_liveness.h"
#include "launch/ranks.h"
#include "worker/device.h"
#include "worker/gguf_model.h"
#include "worker/step_executor.h"
#include "worker/worker_loop.h"

namespace tpserve {
namespace {

// Stands in for the engine while the model loads, so /health answers 503 and requests get
// UNAVAILABLE instead of a refused connection.
class DeferredEngine : public EngineApi {
 public:
  explicit DeferredEngine(ModelInfo loading_info) : loading_info_(std::move(loading_info)) {}
  void Set(EngineApi* e) { engine_.store(e); }
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(ServeRequest r) override {
    EngineApi* e = engine_.load();
    if (e == nullptr) return absl::UnavailableError("the model is still loading");
    return e->Submit(std::move(r));
  }
  EngineStats Stats() const override {
    EngineApi* e = engine_.load();
    return e ? e->Stats() : EngineStats{};
  }
  const ModelInfo& Info() const override {
    EngineApi* e = engine_.load();
    return e ? e->Info() : loading_info_;
  }
  bool Ready() const override {
    EngineApi* e = engine_.load();
    return e != nullptr && e->Ready();
  }
  absl::Status Health() const override {
    EngineApi* e = engine_.load();
    return e == nullptr ? absl::UnavailableError("the model is still loading") : e->Health();
  }

 private:
  ModelInfo loading_info_;
  std::atomic<EngineApi*> engine_{nullptr};
};

// Each HTTP connection is a file descriptor, and the usual soft limit (1024) is below the
// default --max-connections: raise the soft limit toward the hard one. A message when the
// limit stays too low for `connections`, else OK.
absl::Status RaiseOpenFileLimit(int connections) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return absl::OkStatus();
  const rlim_t want = static_cast<rlim_t>(connections) + 256;  // the model's files, MPI, gRPC
  if (limit.rlim_cur < want && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = std::min(want, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur >= want) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("warning: the open-file limit (", limit.rlim_cur, ", hard ", limit.rlim_max,
                   ") is below --max-connections ", connections,
                   " + 256; connections past it are refused by the kernel (raise `ulimit -n`)"));
}

void Log(const WorldConfig& w, const std::string& msg) {
  std::fprintf(stderr, "tpserve[rank %d]: %s\n", w.rank, msg.c_str());
  std::fflush(stderr);
}

// Host names of every rank, on every rank.
std::vector<RankInfo> GatherRanks(Communicator& comm, const std::string& host) {
  char mine[64] = {0};
  std::snprintf(mine, sizeof(mine), "%s", host.c_str());
  std::vector<char> all(64 * comm.size());
  comm.AllGather(mine, 64, all.data());
  std::vector<RankInfo> out;
  for (int r = 0; r < comm.size(); ++r) out.push_back(RankInfo{r, std::string(&all[64 * r])});
  return out;
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "signal";
  }
}

struct SignalWatcher {
  std::atomic<ServingEngine*> engine{nullptr};
  std::atomic<bool> stop{false};
  std::atomic<int> received{0};
};

// Rank 0, told by the liveness watcher that `rank` died: the engine thread is stuck in a
// collective with it and the job is going down (mpirun kills the other ranks within ~2 s).
// Every open stream ends now with an UNAVAILABLE error naming the rank, the front ends get
// a moment to write it, and the process exits 1 (MPI cannot finalize past a stuck collective).
[[noreturn]] void OnRankLost(const WorldConfig& world, const std::vector<RankInfo>& ranks, int rank,
                             ServingEngine* engine) {
  const std::string host = rank < static_cast<int>(ranks.size()) ? ranks[rank].host : "?";
  const std::string why = absl::StrCat("rank ", rank, " of ", ranks.size(), " (host ", host,
                                       ") is gone: the job is stopping; retry on another server");
  Log(world, why);
  if (engine != nullptr) engine->FailAll(absl::UnavailableError(why));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the HTTP/gRPC threads write the errors
  Log(world, absl::StrCat("rank ", rank, " is gone; exiting"));
  std::_Exit(1);
}

// `ranks_are_processes`: MPI ranks (each can die alone), not threads of this process.
int RunRank(const ServeCommandOptions& o, const WorldConfig& world, Communicator& comm, SignalWatcher& signals,
            bool ranks_are_processes) {
  const bool coordinator = comm.rank() == 0;
  if (ranks_are_processes) Log(world, absl::StrCat("pid ", getpid(), " on ", world.node));
  // --model's GGUF file, parsed once for the config, the weights, the tokenizer and the
  // defaults. Where it fails, each of those opens it again and reports why, as a plain
  // model path would.
  EngineOptions engine_options = o.engine;
  if (auto gguf = OpenGgufModel(o.engine.model, o.engine.load_format); gguf.ok()) {
    engine_options.gguf = *std::move(gguf);
  }
  // Every rank sees the same flags and layout, so every rank refuses alike.
  if (o.pipeline_micro_batches < 0 || o.pipeline_micro_batches > world.pp_size) {
    Log(world, absl::StrCat("error: --pipeline-micro-batches ", o.pipeline_micro_batches, ": must be 0 (one per stage) "
                            "or 1 to the pipeline's ", world.pp_size, " stage(s)"));
    return 1;
  }
  const std::vector<std::string> names =
      o.served_model_names.empty() ? std::vector<std::string>{o.engine.model} : o.served_model_names;
  ModelInfo loading;
  loading.served_model_name = names[0];
  loading.speculative_config = o.engine.speculative.ToJson();
  loading.num_speculative_tokens = o.engine.speculative.enabled() ? o.engine.speculative.num_speculative_tokens : 0;
  DeferredEngine deferred(loading);

  // Rank 0 answers (503 / UNAVAILABLE) while the model loads.
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ModelChatTemplate> chat;
  FrontendMetrics metrics(deferred, names[0]);
  // One budget for building requests (parse, chat template, tokenize) across both APIs.
  auto render_pool = std::make_shared<TaskPool>(o.render_threads, static_cast<size_t>(o.max_pending_renders),
                                                "tpserve-render");
  std::unique_ptr<GrpcServer> grpc;
  std::unique_ptr<HttpServer> http;
  absl::Status front = absl::OkStatus();
  // Rank 0 alone builds requests, so it alone reads the model's sampling defaults; a bad flag
  // or file stops every rank (front is agreed on below) before the weights load.
  GenerationDefaults generation_defaults;
  if (coordinator) {
    absl::StatusOr<GenerationDefaults> defaults = LoadModelGenerationDefaults(o.generation_config, o.engine.model,
                                                                                 engine_options.gguf.get());
    if (defaults.ok()) {
      generation_defaults = *std::move(defaults);
      for (const std::string& line : DescribeGenerationDefaults(generation_defaults)) Log(world, line);
    } else {
      front = defaults.status();
    }
  }
  std::optional<ToolCallFormat> tool_call_parser;
  if (coordinator && front.ok() && !o.tool_call_parser.empty()) {
    absl::StatusOr<ToolCallFormat> parser = ParseToolCallFormatName(o.tool_call_parser);
    if (parser.ok()) {
      tool_call_parser = *parser;
    } else {
      front = absl::InvalidArgumentError(absl::StrCat("--tool-call-parser: ", parser.status().message()));
    }
  }
  if (coordinator && front.ok()) {
    auto text = LoadModelText(o.engine.model, o.tokenizer, /*with_chat=*/true, engine_options.gguf.get());
    if (!text.ok()) {
      front = absl::Status(text.status().code(),
                           absl::StrCat(text.status().message(), " (serving needs a tokenizer: pass --tokenizer)"));
    } else {
      tokenizer = std::move(text->tokenizer);
      chat = std::move(text->chat);
      if (chat == nullptr) {
        Log(world, absl::StrCat("no chat template (chat requests will fail): ", text->chat_status.message()));
      }
      // One block for both front ends.
      FrontendOptions shared;
      shared.served_model_names = names;
      shared.render_pool = render_pool;
      shared.metrics = &metrics;
      shared.generation_defaults = generation_defaults;
      shared.tool_call_parser = tool_call_parser;
      shared.api_keys = o.api_keys;
      if (o.grpc_port >= 0) {
        GrpcServerOptions go;
        go.listen.address = absl::StrCat(o.http.host, ":", o.grpc_port);
        go.listen.max_receive_message_bytes = o.http.max_body_bytes;
        go.listen.tls = o.grpc_tls;
        go.frontend = shared;
        grpc = std::make_unique<GrpcServer>(deferred, *tokenizer, chat.get(), go);
        front = grpc->Start();
      }
      if (front.ok() && o.http.port >= 0) {
        HttpServerOptions ho;
        ho.transport = o.http;
        ho.frontend = shared;
        if (absl::Status fds = RaiseOpenFileLimit(o.http.max_connections); !fds.ok()) Log(world, std::string(fds.message()));
        if (front.ok()) {
          http = std::make_unique<HttpServer>(deferred, *tokenizer, chat.get(), ho);
          front = http->Start();
        }
      }
      if (front.ok()) {
        Log(world, absl::StrCat("listening: gRPC ", grpc ? absl::StrCat(o.http.host, ":", grpc->port()) : "off", ", HTTP ",
                                http ? absl::StrCat(o.http.host, ":", http->port()) : "off", " (loading the model)"));
        // How many keys, never what they are.
        if (!o.api_keys.empty()) {
          Log(world, absl::StrCat("API keys: ", o.api_keys.size(), " set; requests need \"Authorization: Bearer <key>\" "
                                  "(HTTP /health and gRPC health and reflection stay open)"));
        }
        // The bound ports (--http-port 0 / --grpc-port 0: the kernel's choice), for scripts.
        const ListeningPorts ports{http ? http->port() : -1, grpc ? grpc->port() : -1};
        std::fputs(ListeningLines(o.http.host, ports).c_str(), stderr);
        std::fflush(stderr);
        if (!o.port_file.empty()) front = WritePortFile(o.port_file, ports);
      }
    }
  }
  absl::Status front_agreed = comm.AgreeOnStatus(front);
  if (!front_agreed.ok()) {
    if (coordinator) Log(world, absl::StrCat("error: ", front_agreed.message()));
    return 1;
  }
  const std::vector<RankInfo> ranks = GatherRanks(comm, world.node);
  // Before the model loads: a rank lost from here on is reported, not just dropped.
  RankLiveness liveness;
  if (ranks_are_processes) {
    std::vector<std::string> hosts;
    for (const RankInfo& r : ranks) hosts.push_back(r.host);
    liveness = StartRankLiveness(
        comm, hosts, [&](int rank) { OnRankLost(world, ranks, rank, signals.engine.load()); },
        [&](const std::string& msg) { Log(world, msg); });
  }

  auto engine = StartEngine(engine_options, world, comm);
  if (!engine.ok()) {
    if (coordinator || !absl::StartsWith(engine.status().message(), "rank ")) {
      Log(world, absl::StrCat("error: ", engine.status().message()));
    }
    return 1;
  }
  if (!coordinator) {
    absl::Status st = RunWorkerLoop(*engine->model, comm, engine->drafter.get());
    return st.ok() ? 0 : 1;
  }

  // Rank 0: the coordinator loop.
  const ModelConfig& mc = engine->config;
  if (tokenizer->vocab_size() > mc.vocab_size) {
    Log(world, absl::StrCat("error: the tokenizer has ", tokenizer->vocab_size(), " tokens but the model's vocab_size is ",
                            mc.vocab_size));
    StepExecutor(*engine->model, comm).Shutdown();
    return 1;
  }
  ModelInfo info;
  info.served_model_name = names[0];
  info.architecture = std::string(ArchName(mc.arch));
  info.parameter_count = mc.ParameterCount();
  info.dtype = std::string(DTypeName(engine->model->weight_dtype()));
  info.quantization = engine->model->weight_formats().Summary();
  info.weight_formats = engine->model->weight_formats().Describe(engine->model->weight_dtype());
  info.kv_cache_dtype = engine->kv_cache_dtype;
  info.tensor_parallel_size = world.tp_size;
  info.pipeline_parallel_size = world.pp_size;
  info.pipeline_stages = DescribeStages(engine->stage_bounds);
  info.pipeline_micro_batches = o.pipeline_micro_batches > 0 ? o.pipeline_micro_batches : world.pp_size;
  info.ranks = ranks;
  info.max_model_len = mc.max_position_embeddings;
  info.block_size = engine->model->block_size();
  info.kv_blocks = engine->model->num_kv_blocks();
  info.kv_bytes_per_block = engine->model->KvBytesPerBlock();
  info.weights = engine->weights_description;
  info.engine_version = absl::StrCat("tpserve ", EngineVersion());
  if (engine->device == DeviceKind::kCuda) {
    auto facts = DescribeCudaDevice(engine->gpu);
    info.device = facts.ok() ? facts->name : engine->backend->name();
    info.driver_version = facts.ok() ? CudaVersionString(facts->driver_version) : "unknown";
    info.cuda_version = facts.ok() ? CudaVersionString(facts->runtime_version) : "unknown";
    info.device_count = engine->gpus_in_use;
    info.kernels = absl::StrCat("cuda: ", KernelOptionsName(o.engine.kernels), ", ",
                                engine->model->cuda_graphs() ? "CUDA graphs" : "eager");
  } else {
    info.device = CpuDeviceName();
    info.device_count = 0;
    info.cpu_gemm = engine->cpu_gemm.description;
  }
  info.max_num_seqs = o.max_num_seqs;
  info.speculative_config = loading.speculative_config;
  info.num_speculative_tokens = loading.num_speculative_tokens;
  info.max_num_batched_tokens = o.max_num_batched_tokens;
  info.weight_bytes = engine->rank_memory.at(0).process_weight_bytes;
  info.load_peak_rss_bytes = engine->rank_memory.at(0).peak_rss_after_load_bytes;

  ServingConfig sc;
  sc.scheduler = SchedulerConfigFor(*engine->model, o.max_num_seqs, o.max_num_batched_tokens, o.engine.max_model_len);
  sc.scheduler.enable_prefix_caching = o.enable_prefix_caching;
  if (o.pipeline_micro_batches > 0) sc.scheduler.max_steps_in_flight = o.pipeline_micro_batches;
  sc.max_queue = o.max_queue;
  sc.seed = o.seed;
  sc.speculative = o.engine.speculative;
  for (int32_t id : tokenizer->eos_ids()) {
    std::vector<int32_t>& eos = sc.scheduler.eos_token_ids;
    if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  }
  absl::Status sched_ok = sc.scheduler.Validate();
  StepExecutor executor(*engine->model, comm, engine->drafter.get());
  if (!sched_ok.ok()) {
    Log(world, absl::StrCat("error: ", sched_ok.message()));
    executor.Shutdown();
    return 1;
  }
  ServingEngine serving(executor, *tokenizer, sc, info);
  signals.engine.store(&serving);
  deferred.Set(&serving);
  Log(world, absl::StrCat("ready: ", info.architecture, " ", names[0], " on ", engine->backend->name(),
                          ", tp=", world.tp_size, " (",
                          engine->device_comm ? engine->device_comm->name() : comm.name(), ")",
                          world.pp_size > 1 ? absl::StrCat(", pp=", world.pp_size, " (", info.pipeline_stages, "; ",
                                                           info.pipeline_micro_batches, " in flight)")
                                            : "",
                          ", load ",
                          engine->load_seconds, " s, KV blocks per group ", absl::StrJoin(info.kv_blocks, "/")));
  Log(world, absl::StrCat("memory: ", DescribeLoadMemory(*engine)));
  if (!info.speculative_config.empty()) Log(world, absl::StrCat("speculative decoding: ", info.speculative_config));
  if (!info.cpu_gemm.empty()) Log(world, absl::StrCat("matmuls: ", info.cpu_gemm));
  Log(world, absl::StrCat("weights in memory (rank 0): ", info.weight_formats));
  Log(world, absl::StrCat("KV cache: ", engine->kv_cache_note));
  if (!engine->cpu_huge_pages.empty()) Log(world, absl::StrCat("huge pages: ", engine->cpu_huge_pages));
  if (!engine->cpu_threads_note.empty()) Log(world, absl::StrCat("CPU threads: ", engine->cpu_threads_note));
  if (const std::string tuning = DescribeTuning(engine->tune_report); !tuning.empty()) {
    Log(world, absl::StrCat(tuning, " (rank 0)"));
  }
  if (signals.received.load() > 0) serving.Shutdown(absl::Seconds(o.shutdown_timeout_s));
  serving.Run();  // returns after a drain
  signals.engine.store(nullptr);
  Log(world, "drained; shutting down");
  if (grpc) grpc->Shutdown(absl::Seconds(1));
  if (http) http->Shutdown();
  deferred.Set(nullptr);
  executor.Shutdown();
  return 0;
}

}  // namespace

sigset_t DrainSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  return set;
}

namespace {

// A drain signal delivered to a thread that does not block it: a library's thread started
// before main() could block them (OpenBLAS's pool starts in its constructor), where the
// default action killed the rank. Caught here instead, for the watcher to take. A global,
// as a signal handler's state must be; lock-free, so the store is async-signal-safe.
std::atomic<int> stray_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
void CatchStraySignal(int sig) { stray_signal.store(sig); }

}  // namespace

int TakeStraySignal() { return stray_signal.exchange(0); }

void BlockDrainSignals() {
  const sigset_t set = DrainSignals();
  struct sigaction action {};
  action.sa_handler = CatchStraySignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &action, nullptr);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

namespace {

absl::Status Positive(absl::string_view flag, double v) {
  return v > 0 ? absl::OkStatus() : absl::InvalidArgumentError(absl::StrCat("--", flag, " must be positive, got ", v));
}

}  // namespace

absl::Status ValidateHttpTransportFlags(const HttpTransportOptions& http) {
  for (const absl::Status& s : {Positive("max-connections", http.max_connections),
                                Positive("timeout-keep-alive", absl::ToDoubleSeconds(http.keep_alive_timeout)),
                                Positive("http-header-timeout", absl::ToDoubleSeconds(http.header_timeout)),
                                Positive("http-body-timeout", absl::ToDoubleSeconds(http.body_timeout)),
                                Positive("http-threads", http.io_threads),
                                Positive("max-body-bytes", static_cast<double>(http.max_body_bytes))}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateServeOptions(const ServeCommandOptions& o) {
  TP_RETURN_IF_ERROR(ValidateHttpTransportFlags(o.http));
  for (const absl::Status& s :
       {Positive("render-threads", o.render_threads), Positive("max-pending-renders", o.max_pending_renders)}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

int RunServe(const ServeCommandOptions& o, const WorldConfig& mpi_world) {
  if (absl::Status valid = ValidateServeOptions(o); !valid.ok()) {
    if (mpi_world.rank == 0) std::fprintf(stderr, "tpserve: %s\n", std::string(valid.message()).c_str());
    return 2;
  }
  // Rank 0 drains; the other ranks wait for rank 0's shutdown plan. main() blocked the
  // signals before MPI started its threads; blocking again covers callers that did not.
  BlockDrainSignals();
  const sigset_t set = DrainSignals();
  SignalWatcher signals;
  std::thread watcher([&] {
    while (!signals.stop.load()) {
      timespec ts{0, 200 * 1000 * 1000};
      int sig = sigtimedwait(&set, nullptr, &ts);
      if (sig <= 0) sig = TakeStraySignal();  // within 200 ms
      if (sig <= 0) continue;
      signals.received.fetch_add(1);
      if (ServingEngine* e = signals.engine.load()) e->Shutdown(absl::Seconds(o.shutdown_timeout_s));
      if (mpi_world.rank == 0) {
        std::fprintf(stderr, "tpserve[rank 0]: %s: draining (up to %g s)\n", SignalName(sig), o.shutdown_timeout_s);
      }
    }
  });
  const int code = RunOnRanks(mpi_world, o.parallel, [&](const WorldConfig& world, Communicator& comm) {
    return RunRank(o, world, comm, signals, mpi_world.world_size > 1);
  });
  signals.stop.store(true);
  watcher.join();
  return code;
}

}  // namespace tpserve
