# GPU tests, include()d by tests/CMakeLists.txt: each is its own ctest target labelled
# `gpu` (run them with `ctest -L gpu`); each skips with a message where
# cudaGetDeviceCount reports no device, so CI (no GPU) builds and skips them.
# The memory planner's test is plain CPU and always built.
tp_add_test(memory_planner_test SOURCES memory_planner_test.cc LIBS tpserve_memory_planner)

# A whole test binary that skipped for want of a device reports "Skipped" in ctest. Each
# runs in seconds on a GPU: 120 s means a hang, and a hang must not eat a GPU lease.
function(tp_gpu_test_skips name)
  set_tests_properties(${name} PROPERTIES SKIP_REGULAR_EXPRESSION "no CUDA device \\(cudaGetDeviceCount"
                       TIMEOUT 120)
endfunction()

if(TPSERVE_HAVE_CUDA)
  tp_add_test(cuda_elementwise_test SOURCES cuda_elementwise_test.cc
              LIBS tpserve_kernels_cuda tpserve_kernels_cpu LABELS gpu)
  tp_add_test(cuda_attention_test SOURCES cuda_attention_test.cc
              LIBS tpserve_kernels_cuda tpserve_kernels_cpu LABELS gpu)
  tp_add_test(cuda_linear_test SOURCES cuda_linear_test.cc
              LIBS tpserve_kernels_cuda tpserve_kernels_cpu LABELS gpu)
  tp_add_test(cuda_sampling_test SOURCES cuda_sampling_test.cc LIBS tpserve_kernels_cuda LABELS gpu)
  tp_add_test(cuda_communicator_test SOURCES cuda_communicator_test.cc LIBS tpserve_cuda LABELS gpu)
  tp_add_test(cuda_graph_test SOURCES cuda_graph_test.cc LIBS tpserve_cuda LABELS gpu)
  tp_add_test(cuda_model_test SOURCES cuda_model_test.cc LIBS tpserve_cuda nlohmann_json::nlohmann_json LABELS gpu)
  tp_add_test(cuda_engine_test SOURCES cuda_engine_test.cc LIBS tpserve_launch tpserve_cuda LABELS gpu)
  # The sm_90a wgmma prefill kernel has not yet run on a GPU: its test is a process of its
  # own, so that a crash there costs none of the other attention results.
  set_tests_properties(cuda_attention_test PROPERTIES ENVIRONMENT "GTEST_FILTER=-*Wgmma*")
  add_test(NAME cuda_attention_wgmma_test COMMAND cuda_attention_test --gtest_filter=*Wgmma*)
  set_tests_properties(cuda_attention_wgmma_test PROPERTIES LABELS gpu)
  foreach(t cuda_elementwise_test cuda_attention_test cuda_attention_wgmma_test cuda_linear_test cuda_sampling_test
            cuda_communicator_test cuda_graph_test cuda_model_test cuda_engine_test)
    tp_gpu_test_skips(${t})
  endforeach()
endif()
