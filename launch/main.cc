// The tpserve binary: `tpserve generate` (offline generation), `tpserve serve` (gRPC and
// OpenAI HTTP APIs), `tpserve router` (one HTTP door for many deployments), `tpserve client`.
// Flags are parsed here and only here. Tested by tests/cli_test.sh, tests/serve_test.sh and
// tests/router_test.sh.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "kernels/cpu/cpu_features.h"
#include "launch/device_choice.h"
#include "launch/generate_command.h"
#include "worker/communicator.h"
#include "worker/device.h"
#if TPSERVE_HAVE_SERVING
#include "launch/client_command.h"
#include "launch/router_command.h"
#include "launch/serve_command.h"
#endif

ABSL_FLAG(std::string, model, "", "Checkpoint directory (Hugging Face layout), a GGUF file, or built-in model name "
                                  "(gemma-4-31b, gemma-4-1b, gemma-4-tiny; needs --load-format dummy)");
ABSL_FLAG(std::string, load_format, "auto", "auto | safetensors | gguf | dummy (deterministic random weights); auto: gguf for a *.gguf --model");
ABSL_FLAG(std::string, dtype, "auto", "Weight dtype: auto (the checkpoint's) | bfloat16 | float16 | float32");
ABSL_FLAG(std::string, quantization, "none",
          "Quantize a float model's matrices at load (vLLM's flag): none | int8 (int8 Q8_0 blocks, an fp16 scale "
          "per 32 weights, int8 activations in decode) | fp8 (FP8 E4M3, an fp32 scale per 128 weights, fp32 "
          "activations): about half of bf16's memory; CPU backend");
ABSL_FLAG(bool, dequantize_weights, false,
          "Widen a GGUF file's quantized weights to --dtype at load instead of keeping its blocks (Q8_0, Q4_0, "
          "Q5_0, Q4_K, Q5_K, Q6_K stay quantized on the CPU by default; the start-up log says what did)");
ABSL_FLAG(int, tensor_parallel_size, 0, "Ranks each layer is split over, one pipeline stage's (default: the ranks "
                                        "per node under MPI, 1 without; without mpirun, ranks run as threads)");
ABSL_FLAG(int, pipeline_parallel_size, 0, "Pipeline stages, each a contiguous range of layers on tensor-parallel-size "
                                          "ranks (default: the nodes under MPI, 1 without); world = tensor x pipeline");
ABSL_FLAG(std::string, device, "auto", "auto | cpu | cuda (auto: cuda where tpserve is built with CUDA and a GPU "
                                      "is visible; rank i of a node runs on GPU i % GPUs)");
ABSL_FLAG(double, gpu_memory_utilization, 0.9, "cuda: fraction of each GPU's memory the ranks on it may use "
                                              "(weights, activations, KV cache), in (0, 1]");
ABSL_FLAG(int, threads, 0, "CPU threads per rank (default: cores / ranks on the node)");
ABSL_FLAG(std::string, cpu_gemm, "auto", "CPU: matmuls with fp32 activations (sgemm: OpenBLAS "
          "fp32 prefill, fp32-FMA decode) | onednn-bf16 (bf16 weights: activations rounded to bf16, oneDNN's bf16 "
          "prefill matmul on AMX / AVX512-BF16, AVX512-BF16 dot products in decode) | amx-bf16 (onednn-bf16's "
          "numbers with tpserve's own AMX-BF16 prefill tiles; CPUs with AMX) | auto (onednn-bf16 where the CPU "
          "has bf16 units, else sgemm)");
ABSL_FLAG(std::string, cpu_quant_prefill, "auto", "CPU: how prefill multiplies quantized (GGUF block) weights: "
          "widen (blocks widened to --cpu-gemm's precision for its GEMM) | int8 (activations quantized to int8 per "
          "block and decode's dot kernels, as llama.cpp) | auto (int8 on Intel CPUs with AVX-512 VNNI but no AMX, "
          "where it measured faster; widen elsewhere). FP8 weights always widen");
ABSL_FLAG(std::string, cpu_huge_pages, "on", "CPU: on | off. on: weight buffers of >= 2 MiB are 2 MiB-aligned "
          "and madvised for transparent huge pages (no effect where the kernel's THP policy is never; the start-up "
          "log says which). The KV cache and activations are on 4 KiB pages either way");
ABSL_FLAG(std::string, kv_cache_memory, "1GiB", "KV cache memory per rank on the CPU, e.g. 512MiB (on cuda the KV "
                                                "cache takes what --gpu-memory-utilization leaves). Reserved at "
                                                "start, resident as blocks are first used: free blocks are taken "
                                                "before cached ones are evicted, so a prefix-caching server's RSS "
                                                "grows towards the whole reservation (Stats kv_bytes_touched, "
                                                "/metrics tpserve_kv_cache_touched_bytes); size it to the memory "
                                                "the cache may hold");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "How the KV cache holds keys and values (vLLM's flag): auto (as the activations: fp32 on the CPU, "
          "bfloat16 on cuda) | bfloat16 | fp8 (= fp8_e4m3: FP8 E4M3 with an fp32 scale per token and KV head, about "
          "a quarter of fp32's bytes; CPU backend). The start-up log says how many KV blocks it bought");
ABSL_FLAG(int64_t, max_model_len, 0, "Longest prompt + output, in tokens (default: the model's)");
ABSL_FLAG(int64_t, max_num_batched_tokens, 2048, "Most tokens per step (prefill chunk size)");
ABSL_FLAG(int, block_size, 16, "KV cache block size in tokens");
ABSL_FLAG(bool, enforce_eager, true, "cuda: run every step eagerly; =false captures CUDA graphs of decode steps for "
                                     "batch sizes 1, 2, 4, 8, 16, 24, ... up to --max-num-seqs, at most 256 (on by "
                                     "default until the graph path has run on a GPU: docs/gpu_backend.md)");
ABSL_FLAG(std::string, kernels, "split",
          "cuda: how projections run: split (default: the split-K GEMV at 1-4 rows, cuBLASLt's heuristic above), "
          "bulk (compute capability 9.0+: GEMV weights streamed through shared memory by bulk copies; the same "
          "results), tuned (each weight shape's fastest GEMV and cuBLASLt algorithm and each attention layout's "
          "fastest prefill tile, measured at start-up; GEMM and attention results move by rounding); each may add "
          "+pdl (9.0+: each GEMV starts while the kernel before it finishes). Being measured, see "
          "docs/gpu_backend.md");
ABSL_FLAG(std::string, prompt, "", "Prompt text (tokenized with the model's tokenizer.json)");
ABSL_FLAG(std::string, prompt_ids, "", "Prompt as comma-separated token ids, e.g. 2,651,1234");
ABSL_FLAG(std::string, tokenizer, "", "tokenizer.json path (default: MODEL/tokenizer.json)");
ABSL_FLAG(int, max_tokens, 16, "Tokens to generate");
ABSL_FLAG(int, logprobs, 0, "Top-N logprobs to report per generated token");
ABSL_FLAG(bool, ignore_eos, false, "Keep generating past EOS");
ABSL_FLAG(bool, json, false, "Print one JSON object instead of text");
ABSL_FLAG(int64_t, seed, -1, "Default sampling seed (vLLM's --seed): requests without a seed get seeds drawn "
          "from it, so a run repeats (-1: fresh entropy)");
ABSL_FLAG(uint64_t, dummy_weight_seed, 0, "Seed of --load-format dummy weights");
ABSL_FLAG(std::string, speculative_config, "",
          "Speculative decoding (vLLM's flag), a JSON object: {\"method\": \"ngram\", \"num_speculative_tokens\": K, "
          "\"prompt_lookup_min\": A, \"prompt_lookup_max\": B} drafts up to K tokens per step by prompt lookup and "
          "verifies them in one forward (the same tokens as without; see docs/speculative_decoding.md); "
          "{\"method\": \"mtp\", \"model\": DIR, \"num_speculative_tokens\": K} drafts with Gemma 4's MTP drafter "
          "(the assistant checkpoint in DIR, loaded on every rank; with --load-format dummy also a built-in shape: "
          "gemma-4-31b-assistant, gemma-4-1b-assistant, gemma-4-tiny-assistant). Empty: off");
ABSL_FLAG(std::string, generation_config, "auto",
          "Sampling defaults for requests that leave temperature, top_k, top_p, min_p or repetition_penalty unset "
          "(vLLM's flag): auto (the --model folder's generation_config.json, where it has one), vllm (none: "
          "tpserve's own defaults), or a folder holding a generation_config.json");
ABSL_FLAG(std::string, tool_call_parser, "",
          "serve: how the model writes tool calls, for chat requests with tools and tool_choice \"auto\" (vLLM's "
          "flag): gemma4, llama3_json, hermes, qwen3_coder or none; empty: read off the chat template "
          "(docs/tool_calls.md)");
// `tpserve serve` (also the engine flags above).
ABSL_FLAG(std::string, host, "0.0.0.0", "serve: address the APIs listen on");
ABSL_FLAG(int, grpc_port, 50051, "serve: gRPC port (0: any free port, see --port-file; -1: off). router: its "
          "tpserve.v1 gRPC port, off unless given");
ABSL_FLAG(std::string, grpc_tls_certfile, "",
          "serve, router: TLS on the gRPC port: the server's certificate chain (PEM), with --grpc-tls-keyfile "
          "(empty: plaintext gRPC). client: with --grpc-tls, a client certificate for a server that verifies "
          "clients (--grpc-tls-client-ca-file)");
ABSL_FLAG(std::string, grpc_tls_keyfile, "", "serve, router: the private key (PEM) of --grpc-tls-certfile. client: "
                                             "the key of its --grpc-tls-certfile");
ABSL_FLAG(std::string, grpc_tls_client_ca_file, "",
          "serve, router: with --grpc-tls-certfile, require every gRPC client to present a certificate signed by "
          "one of these CAs (PEM; mutual TLS); empty: clients are not asked for one");
ABSL_FLAG(int, http_port, 8000, "serve: OpenAI-compatible HTTP port (0: any free port, see --port-file; -1: off). "
          "router: its OpenAI HTTP port, with /health and /metrics (-1: off, gRPC only, with --grpc-port)");
ABSL_FLAG(std::string, port_file, "", "serve: once both APIs listen, write the ports they got to this file as "
                                      "{\"http\": P, \"grpc\": Q} (null: off; written to FILE.tmp, then renamed); "
                                      "they are also logged on stderr as \"tpserve: HTTP listening on HOST:P\"");
ABSL_FLAG(std::string, served_model_name, "", "serve: names clients use in \"model\", comma-separated "
                                              "(default: the --model argument)");
ABSL_FLAG(int, max_num_seqs, 256, "serve: sequences running at once (on cuda it also sizes the start-up step)");
ABSL_FLAG(int, pipeline_micro_batches, 0,
          "serve, with pipeline stages: steps (micro-batches) in flight at once, 1 to the stages (0: one per stage; 1: "
          "the stages run one step at a time)");
ABSL_FLAG(int, max_queue, 1024, "serve: waiting requests at most; more get RESOURCE_EXHAUSTED / HTTP 429");
ABSL_FLAG(bool, enable_prefix_caching, true, "serve: reuse the KV cache of shared prompt prefixes");
ABSL_FLAG(double, shutdown_timeout, 30, "serve: seconds a drain (SIGTERM, SIGINT or SIGUSR1) waits for in-flight "
                                        "requests before cancelling them");
ABSL_FLAG(int64_t, max_body_bytes, 4 << 20, "serve: largest request body");
ABSL_FLAG(int, max_connections, 4096, "serve: HTTP connections open at once; one more gets 503 and is closed");
ABSL_FLAG(double, timeout_keep_alive, 5, "serve: seconds an idle HTTP keep-alive connection is held (vLLM's flag)");
ABSL_FLAG(double, http_header_timeout, 10, "serve: seconds a client has to send a request's headers (a new "
          "connection: from its accept; a kept-alive one: from the request's first byte); slower clients are "
          "dropped");
ABSL_FLAG(double, http_body_timeout, 30, "serve: seconds a client has to send a request's body after its headers");
ABSL_FLAG(int, http_threads, 2, "serve: HTTP I/O threads (event loops); every connection is served by one of them");
ABSL_FLAG(int, render_threads, 2, "serve: threads that parse, render (chat template) and tokenize requests");
ABSL_FLAG(int, max_pending_renders, 1024, "serve: requests waiting to be rendered at most; more get HTTP 429");
ABSL_FLAG(std::string, api_key, "",
          "serve: API keys (vLLM's flag), comma-separated: every HTTP route but /health answers 401 and every "
          "tpserve.v1 gRPC call UNAUTHENTICATED unless the request sends \"Authorization: Bearer KEY\" (gRPC: that "
          "metadata) with one of them. Unset: $TPSERVE_API_KEY, else $VLLM_API_KEY (the environment keeps the key out "
          "of `ps`); none: no key needed. client: the key to send (unset: $TPSERVE_API_KEY)");

// `tpserve router` (also --host, --http-port, --port-file, --api-key and the HTTP server's flags).
ABSL_FLAG(std::string, config, "", "router: the JSON file naming the models and their backends (docs/router.md)");
ABSL_FLAG(std::string, request_log, "", "router: append one JSON line per proxied request to this file (empty: off)");
ABSL_FLAG(int, metrics_port, -1,
          "router: a port serving only GET /metrics and /health, with --api-key as on the HTTP port (0: any free "
          "port, see --port-file; -1: off); with or without --http-port (a gRPC-only router's metrics)");

// `tpserve client` (also --model: the served model name, --prompt, --max-tokens).
ABSL_FLAG(std::string, grpc, "", "client: the server's gRPC address, HOST:PORT");
ABSL_FLAG(bool, grpc_tls, false, "client: --grpc over TLS (the server's --grpc-tls-certfile), verified against "
                                  "--grpc-tls-ca-file, else gRPC's default roots");
ABSL_FLAG(std::string, grpc_tls_ca_file, "", "client: with --grpc-tls, the CA certificates (PEM) the server's "
                                             "certificate is verified against");
ABSL_FLAG(std::string, http, "", "client: the server's HTTP URL, e.g. http://127.0.0.1:8000");
ABSL_FLAG(bool, chat, false, "client: send --prompt as a user message (the chat template applies)");
ABSL_FLAG(double, temperature, -1, "client: sampling temperature (negative: the server's default); generate: "
          "negative = the model's generation config's temperature (--generation-config), else 0, greedy");

namespace {

constexpr char kUsage[] =
    "tpserve: tensor-parallel LLM inference.\n\n"
    "  tpserve-mpirun -np N tpserve serve --model DIR|PRESET [--grpc-port 50051] [--http-port 8000]\n"
    "      [--port-file FILE] [--tokenizer PATH] [--shutdown-timeout 30]   (tpserve-mpirun: mpirun on which\n"
    "      SIGTERM/Ctrl-C drain; ports 0: free ports, written to --port-file as {\"http\": P, \"grpc\": Q})\n"
    "      [--grpc-tls-certfile CERT --grpc-tls-keyfile KEY [--grpc-tls-client-ca-file CA]]   (TLS on the\n"
    "      gRPC port, the router's too; with a client CA, clients must present a certificate it signed)\n"
    "  mpirun -np N tpserve generate --model DIR|PRESET [--load-format dummy] (--prompt TEXT | --prompt-ids 1,2,3)\n"
    "      [--max-tokens N] [--logprobs N] [--temperature T] [--seed S] [--json]\n"
    "  Both take --seed S (the default sampling seed; --dummy-weight-seed seeds dummy weights),\n"
    "      --generation-config auto|vllm|DIR (sampling defaults from the model's generation_config.json),\n"
    "      --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}' (speculative decoding;\n"
    "      '{\"method\": \"mtp\", \"model\": ASSISTANT_DIR, \"num_speculative_tokens\": 4}' for Gemma 4's drafter),\n"
    "      --device auto|cpu|cuda, --gpu-memory-utilization F and --enforce-eager (cuda).\n"
    "  tpserve client (--grpc HOST:PORT | --http URL) --prompt TEXT [--chat] [--model NAME]\n"
    "      [--max-tokens N] [--temperature T] [--api-key KEY]\n"
    "      [--grpc-tls [--grpc-tls-ca-file CA] [--grpc-tls-certfile CERT --grpc-tls-keyfile KEY]]\n"
    "  tpserve router --config FILE [--http-port 8000] [--grpc-port Q] [--host H] [--api-key KEY]\n"
    "                 [--request-log FILE] [--port-file FILE] [--metrics-port P]\n"
    "      one OpenAI HTTP door (and with --grpc-port, one tpserve.v1 gRPC door; --http-port -1: gRPC\n"
    "      only) routing by model name to many backends; per-backend timeouts, cooldown, retries,\n"
    "      keep-alive pool and prices in the config; cost and tokens in /metrics (also on --metrics-port,\n"
    "      a port of its own: /metrics and /health only) (docs/router.md)\n"
    "  serve --api-key KEY[,KEY...] (or $TPSERVE_API_KEY): requests need \"Authorization: Bearer KEY\".\n"
    "  tpserve devices: what this binary and machine offer (the CUDA backend and GPUs, the CPU's units)\n\n"
    "Run `tpserve --helpfull` for every flag.";

// Accepts vLLM-style --max-model-len as well as absl's --max_model_len.
void NormalizeFlagNames(int argc, char** argv, std::vector<std::string>& storage) {
  storage.reserve(argc);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") break;
    if (a.size() > 2 && a[0] == '-' && a[1] == '-') {
      const size_t end = std::min(a.find('='), a.size());
      for (size_t k = 2; k < end; ++k) {
        if (a[k] == '-') a[k] = '_';
      }
      storage.push_back(a);
      argv[i] = storage.back().data();
    }
  }
}

// The API keys: --api-key, else $TPSERVE_API_KEY, else (`serve`, as vLLM) $VLLM_API_KEY; each a
// comma-separated list. Only main reads the environment. INVALID_ARGUMENT when the one that is
// set holds no key (only commas or spaces): the server would run open while its operator meant
// it to be closed.
absl::StatusOr<std::vector<std::string>> ApiKeysFromFlagOrEnvironment(bool accept_vllm_variable) {
  std::string keys = absl::GetFlag(FLAGS_api_key);
  std::string source = "--api-key";
  for (const char* variable : {"TPSERVE_API_KEY", "VLLM_API_KEY"}) {
    const char* value = std::getenv(variable);
    if (!keys.empty() || value == nullptr) continue;
    if (std::string(variable) == "VLLM_API_KEY" && !accept_vllm_variable) continue;
    keys = value;
    source = std::string("$") + variable;
  }
  std::vector<std::string> out;
  for (absl::string_view key : absl::StrSplit(keys, ',')) {
    key = absl::StripAsciiWhitespace(key);
    if (!key.empty()) out.emplace_back(key);
  }
  if (out.empty() && !keys.empty()) {
    return absl::InvalidArgumentError(source + " holds no key (only commas and spaces); give one or unset it");
  }
  return out;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "tpserve: error: %s\n", msg.c_str());
  return 2;
}

// The engine flags shared by `generate` and `serve`; returns an exit code (0 = ok).
int EngineOptionsFromFlags(tpserve::EngineOptions& e) {
  e.model = absl::GetFlag(FLAGS_model);
  e.load_format = absl::GetFlag(FLAGS_load_format);
  e.dtype = absl::GetFlag(FLAGS_dtype);
  e.dequantize_weights = absl::GetFlag(FLAGS_dequantize_weights);
  e.quantization = absl::GetFlag(FLAGS_quantization);
  e.device = absl::GetFlag(FLAGS_device);
  e.gpu_memory_utilization = absl::GetFlag(FLAGS_gpu_memory_utilization);
  e.threads = absl::GetFlag(FLAGS_threads);
  e.cpu_gemm = absl::GetFlag(FLAGS_cpu_gemm);
  e.cpu_quant_prefill = absl::GetFlag(FLAGS_cpu_quant_prefill);
  const std::string huge_pages = absl::GetFlag(FLAGS_cpu_huge_pages);
  if (huge_pages != "on" && huge_pages != "off") {
    return Fail("--cpu-huge-pages \"" + huge_pages + "\" is not one of on, off");
  }
  e.cpu_huge_pages = huge_pages == "on";
  e.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  e.block_size = absl::GetFlag(FLAGS_block_size);
  e.max_num_batched_tokens = static_cast<int32_t>(absl::GetFlag(FLAGS_max_num_batched_tokens));
  e.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  e.dummy_seed = absl::GetFlag(FLAGS_dummy_weight_seed);
  e.enforce_eager = absl::GetFlag(FLAGS_enforce_eager);
  auto kernels = tpserve::ParseKernelOptions(absl::GetFlag(FLAGS_kernels));
  if (!kernels.ok()) return Fail("--kernels: " + std::string(kernels.status().message()));
  e.kernels = *kernels;
  auto kv = tpserve::ParseByteSize(absl::GetFlag(FLAGS_kv_cache_memory));
  if (!kv.ok()) return Fail("--kv-cache-memory: " + std::string(kv.status().message()));
  e.kv_cache_bytes = *kv;
  e.kv_cache_dtype = absl::GetFlag(FLAGS_kv_cache_dtype);
  auto speculative = tpserve::ParseSpeculativeConfig(absl::GetFlag(FLAGS_speculative_config));
  if (!speculative.ok()) return Fail(std::string(speculative.status().message()));
  e.speculative = *speculative;
  return 0;
}

#if TPSERVE_HAVE_SERVING
// TLS on the gRPC port, as `serve` and `router` both take it, checked before anything starts (a
// model loads): a wrong file is found at once. `command`: "serve" or "router"; `grpc_port`: -1
// when the port is off (then no TLS flag may be set).
absl::StatusOr<tpserve::GrpcServerTlsOptions> GrpcServerTlsFromFlags(const char* command, int grpc_port) {
  tpserve::GrpcServerTlsOptions tls{.cert_file = absl::GetFlag(FLAGS_grpc_tls_certfile),
                                    .key_file = absl::GetFlag(FLAGS_grpc_tls_keyfile),
                                    .client_ca_file = absl::GetFlag(FLAGS_grpc_tls_client_ca_file)};
  if (!tls.enabled() && tls.client_ca_file.empty()) return tls;
  if (grpc_port < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        command, ": --grpc-tls-* set TLS on the gRPC port, which is off",
        std::string_view(command) == "router" ? ": give --grpc-port Q" : " (--grpc-port -1)"));
  }
  if (absl::Status s = tpserve::CheckGrpcServerTls(command, tls); !s.ok()) return s;
  return tls;
}

// The HTTP transport flags, as `serve` and `router` both take them.
tpserve::HttpTransportOptions HttpTransportFromFlags() {
  tpserve::HttpTransportOptions t;
  t.host = absl::GetFlag(FLAGS_host);
  t.port = absl::GetFlag(FLAGS_http_port);
  t.io_threads = absl::GetFlag(FLAGS_http_threads);
  t.max_connections = absl::GetFlag(FLAGS_max_connections);
  t.max_body_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_body_bytes));
  t.keep_alive_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_keep_alive));
  t.header_timeout = absl::Seconds(absl::GetFlag(FLAGS_http_header_timeout));
  t.body_timeout = absl::Seconds(absl::GetFlag(FLAGS_http_body_timeout));
  return t;
}
#endif

// `grpc_port_given`: --grpc-port was on the command line (its default is serve's 50051).
int RunRouterFromFlags(bool grpc_port_given) {
#if TPSERVE_HAVE_SERVING
  absl::StatusOr<tpserve::RouterConfig> config = tpserve::LoadRouterConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) return Fail(std::string(config.status().message()));
  // The backends' keys come from the environment variables the config names; only main reads them.
  if (absl::Status keys = tpserve::ResolveBackendApiKeys(*config, [](const std::string& name) {
        const char* value = std::getenv(name.c_str());
        return value == nullptr ? std::nullopt : std::optional<std::string>(value);
      });
      !keys.ok()) {
    return Fail(std::string(keys.message()));
  }
  tpserve::RouterCommandOptions o;
  o.config = *std::move(config);
  o.transport = HttpTransportFromFlags();
  if (o.transport.port > 65535 || o.transport.port < -1) {
    return Fail(absl::StrCat("router: --http-port ", o.transport.port, ": a port, 0 (any free one) or -1 (off: ",
                             "gRPC only, with --grpc-port)"));
  }
  // serve's --grpc-port defaults to 50051; the router's gRPC port is off unless given.
  o.grpc_port = grpc_port_given ? absl::GetFlag(FLAGS_grpc_port) : -1;
  if (o.grpc_port > 65535 || o.grpc_port < -1) {
    return Fail(absl::StrCat("router: --grpc-port ", o.grpc_port, ": a port, 0 (any free one) or -1 (off)"));
  }
  absl::StatusOr<tpserve::GrpcServerTlsOptions> tls = GrpcServerTlsFromFlags("router", o.grpc_port);
  if (!tls.ok()) return Fail(std::string(tls.status().message()));
  o.grpc_tls = *std::move(tls);
  if (o.transport.port < 0 && o.grpc_port < 0) {
    return Fail("router: --http-port -1 turns the HTTP port off, and the gRPC port is off too (--grpc-port not "
                "given, or -1): give --grpc-port Q for a gRPC-only router, or an --http-port");
  }
  if (absl::Status valid = tpserve::ValidateHttpTransportFlags(o.transport); !valid.ok()) {
    return Fail(absl::StrCat("router: ", valid.message()));
  }
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (o.metrics_port > 65535 || o.metrics_port < -1) {
    return Fail(absl::StrCat("router: --metrics-port ", o.metrics_port, ": a port, 0 (any free one) or -1 (off)"));
  }
  o.port_file = absl::GetFlag(FLAGS_port_file);
  o.request_log = absl::GetFlag(FLAGS_request_log);
  absl::StatusOr<std::vector<std::string>> keys = ApiKeysFromFlagOrEnvironment(/*accept_vllm_variable=*/false);
  if (!keys.ok()) return Fail(std::string(keys.status().message()));
  o.api_keys = *std::move(keys);
  return tpserve::RunRouter(o);
#else
  return Fail("this tpserve was built without gRPC, Boost and cpp-httplib, so `router` is not available");
#endif
}

int RunClientFromFlags() {
#if TPSERVE_HAVE_SERVING
  tpserve::ClientCommandOptions o;
  o.grpc_target = absl::GetFlag(FLAGS_grpc);
  o.grpc_tls = absl::GetFlag(FLAGS_grpc_tls);
  o.grpc_tls_ca_file = absl::GetFlag(FLAGS_grpc_tls_ca_file);
  o.grpc_tls_cert_file = absl::GetFlag(FLAGS_grpc_tls_certfile);
  o.grpc_tls_key_file = absl::GetFlag(FLAGS_grpc_tls_keyfile);
  o.http_url = absl::GetFlag(FLAGS_http);
  o.model = absl::GetFlag(FLAGS_model);
  o.prompt = absl::GetFlag(FLAGS_prompt);
  o.chat = absl::GetFlag(FLAGS_chat);
  o.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (absl::GetFlag(FLAGS_temperature) >= 0) o.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  absl::StatusOr<std::vector<std::string>> keys = ApiKeysFromFlagOrEnvironment(/*accept_vllm_variable=*/false);
  if (!keys.ok()) return Fail(std::string(keys.status().message()));
  if (keys->size() > 1) return Fail("client: --api-key: give one key (the server accepts any of its keys)");
  if (!keys->empty()) o.api_key = (*keys)[0];
  return tpserve::RunClient(o);
#else
  return Fail("this tpserve was built without gRPC and cpp-httplib, so `client` is not available");
#endif
}

// `tpserve devices`: the CUDA backend as this binary has it (loading the module where it is
// one: a missing symbol or library shows here), the GPUs it sees and the CPU's units.
int RunDevices() {
  absl::StatusOr<std::string> cuda = tpserve::DescribeCudaBuild();
  std::printf("cuda: %s\n", cuda.ok() ? cuda->c_str() : std::string(cuda.status().message()).c_str());
  int code = cuda.ok() ? 0 : 1;
  const int gpus = cuda.ok() ? tpserve::CudaDeviceCount() : 0;
  std::printf("cuda devices: %d\n", gpus);
  for (int d = 0; d < gpus; ++d) {
    absl::StatusOr<tpserve::CudaDeviceFacts> f = tpserve::DescribeCudaDevice(d);
    if (!f.ok()) {
      std::printf("  %d: %s\n", d, std::string(f.status().message()).c_str());
      code = 1;
      continue;
    }
    std::printf("  %d: %s, %.1f GiB, driver CUDA %s, runtime CUDA %s\n", d, f->name.c_str(),
                static_cast<double>(f->total_bytes) / (1 << 30), tpserve::CudaVersionString(f->driver_version).c_str(),
                tpserve::CudaVersionString(f->runtime_version).c_str());
  }
  std::printf("cpu: %s\n", tpserve::cpu::CpuFeaturesName(tpserve::cpu::DetectCpuFeatures()).c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
#if TPSERVE_HAVE_SERVING
  // `serve` drains on SIGTERM/SIGINT/SIGUSR1 from one watcher thread (serve_command.cc):
  // block them before MPI or anything else starts threads, so every thread inherits the mask.
  if (argc > 1 && (std::string(argv[1]) == "serve" || std::string(argv[1]) == "router")) {
    tpserve::BlockDrainSignals();
  }
#endif
  tpserve::WorldConfig world = tpserve::MpiInit(&argc, &argv);
  absl::SetProgramUsageMessage(kUsage);
  std::vector<std::string> flag_storage;
  NormalizeFlagNames(argc, argv, flag_storage);
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  int code = 0;
  if (args.size() < 2) {
    if (world.rank == 0) std::fprintf(stderr, "%s\n", kUsage);
    code = 2;
  } else if (std::string(args[1]) == "generate") {
    tpserve::GenerateCommandOptions o;
    code = EngineOptionsFromFlags(o.engine);
    o.parallel = {absl::GetFlag(FLAGS_tensor_parallel_size), absl::GetFlag(FLAGS_pipeline_parallel_size)};
    o.prompt = absl::GetFlag(FLAGS_prompt);
    o.tokenizer = absl::GetFlag(FLAGS_tokenizer);
    o.max_tokens = absl::GetFlag(FLAGS_max_tokens);
    o.logprobs = absl::GetFlag(FLAGS_logprobs);
    o.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
    o.json = absl::GetFlag(FLAGS_json);
    o.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
    if (absl::GetFlag(FLAGS_temperature) >= 0) o.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
    o.generation_config = absl::GetFlag(FLAGS_generation_config);
    if (absl::GetFlag(FLAGS_seed) >= 0) o.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
    const std::string ids = absl::GetFlag(FLAGS_prompt_ids);
    if (!ids.empty()) {
      for (absl::string_view part : absl::StrSplit(ids, ',', absl::SkipWhitespace())) {
        int32_t id;
        if (!absl::SimpleAtoi(part, &id)) {
          code = Fail("--prompt-ids: \"" + std::string(part) + "\" is not a token id");
          break;
        }
        o.prompt_ids.push_back(id);
      }
    }
    if (code == 0) code = tpserve::RunGenerate(o, world);
  } else if (std::string(args[1]) == "serve") {
#if TPSERVE_HAVE_SERVING
    tpserve::ServeCommandOptions o;
    code = EngineOptionsFromFlags(o.engine);
    o.parallel = {absl::GetFlag(FLAGS_tensor_parallel_size), absl::GetFlag(FLAGS_pipeline_parallel_size)};
    o.tokenizer = absl::GetFlag(FLAGS_tokenizer);
    o.http = HttpTransportFromFlags();
    o.grpc_port = absl::GetFlag(FLAGS_grpc_port);
    if (absl::StatusOr<tpserve::GrpcServerTlsOptions> tls = GrpcServerTlsFromFlags("serve", o.grpc_port); tls.ok()) {
      o.grpc_tls = *std::move(tls);
    } else if (code == 0) {
      code = Fail(std::string(tls.status().message()));
    }
    o.port_file = absl::GetFlag(FLAGS_port_file);
    for (absl::string_view n : absl::StrSplit(absl::GetFlag(FLAGS_served_model_name), ',', absl::SkipWhitespace())) {
      o.served_model_names.emplace_back(n);
    }
    o.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
    o.max_num_batched_tokens = static_cast<int32_t>(absl::GetFlag(FLAGS_max_num_batched_tokens));
    o.max_queue = absl::GetFlag(FLAGS_max_queue);
    o.pipeline_micro_batches = absl::GetFlag(FLAGS_pipeline_micro_batches);
    o.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
    o.shutdown_timeout_s = absl::GetFlag(FLAGS_shutdown_timeout);
    o.render_threads = absl::GetFlag(FLAGS_render_threads);
    o.max_pending_renders = absl::GetFlag(FLAGS_max_pending_renders);
    if (absl::GetFlag(FLAGS_seed) >= 0) o.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
    o.generation_config = absl::GetFlag(FLAGS_generation_config);
    o.tool_call_parser = absl::GetFlag(FLAGS_tool_call_parser);
    if (absl::StatusOr<std::vector<std::string>> keys = ApiKeysFromFlagOrEnvironment(/*accept_vllm_variable=*/true);
        !keys.ok()) {
      if (code == 0) code = Fail(std::string(keys.status().message()));
    } else {
      o.api_keys = *std::move(keys);
    }
    if (code == 0) code = tpserve::RunServe(o, world);
#else
    code = Fail("this tpserve was built without gRPC, Boost and cpp-httplib, so `serve` is not available");
#endif
  } else if (std::string(args[1]) == "router") {
    const bool grpc_port_given = std::any_of(flag_storage.begin(), flag_storage.end(), [](const std::string& f) {
      return f == "--grpc_port" || f.rfind("--grpc_port=", 0) == 0;
    });
    if (world.rank == 0) code = RunRouterFromFlags(grpc_port_given);
  } else if (std::string(args[1]) == "client") {
    if (world.rank == 0) code = RunClientFromFlags();
  } else if (std::string(args[1]) == "devices") {
    if (world.rank == 0) code = RunDevices();
  } else {
    if (world.rank == 0) std::fprintf(stderr, "tpserve: unknown command \"%s\"\n\n%s\n", args[1], kUsage);
    code = 2;
  }
  tpserve::MpiFinalize();
  return code;
}
