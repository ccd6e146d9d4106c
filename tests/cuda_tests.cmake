# GPU tests, include()d by tests/CMakeLists.txt. Built where CUDA is built
# (TPSERVE_HAVE_CUDA); each GPU binary is its own ctest target labelled `gpu` (run them
# with `ctest -L gpu`). Every GPU case skips on its own where cudaGetDeviceCount reports no
# device (TP_SKIP_WITHOUT_GPU), and the binaries' main() (cuda_test_main.cc) reports the
# binary skipped (exit 77) only when no device is visible and no case failed. Cases that
# run on the host only live in CPU binaries that always run: cuda_host_test (host code of
# the CUDA build), cpu_sampling_test, memory_planner_test.
tp_add_test(memory_planner_test SOURCES memory_planner_test.cc LIBS tpserve_memory_planner)

if(TPSERVE_HAVE_CUDA)
  # No device needed, never skipped.
  tp_add_test(cuda_host_test SOURCES cuda_host_test.cc LIBS tpserve_cuda)
  add_test(NAME cuda_module_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cuda_module_test.sh $<TARGET_FILE:tpserve>)
  set_tests_properties(cuda_module_test PROPERTIES TIMEOUT 120)

  set(gpu_main ${CMAKE_CURRENT_SOURCE_DIR}/cuda_test_main.cc)
  tp_add_test(cuda_elementwise_test SOURCES cuda_elementwise_test.cc
              LIBS tpserve_kernels_cuda tpserve_kernels_cpu LABELS gpu MAIN ${gpu_main})
  tp_add_test(cuda_attention_test SOURCES cuda_attention_test.cc
              LIBS tpserve_kernels_cuda tpserve_kernels_cpu LABELS gpu MAIN ${gpu_main})
  tp_add_test(cuda_linear_test SOURCES cuda_linear_test.cc
              LIBS tpserve_kernels_cuda tpserve_kernels_cpu LABELS gpu MAIN ${gpu_main})
  tp_add_test(cuda_sampling_test SOURCES cuda_sampling_test.cc LIBS tpserve_kernels_cuda LABELS gpu
              MAIN ${gpu_main})
  tp_add_test(cuda_communicator_test SOURCES cuda_communicator_test.cc LIBS tpserve_cuda LABELS gpu
              MAIN ${gpu_main})
  tp_add_test(cuda_graph_test SOURCES cuda_graph_test.cc LIBS tpserve_cuda LABELS gpu MAIN ${gpu_main})
  tp_add_test(cuda_model_test SOURCES cuda_model_test.cc LIBS tpserve_cuda nlohmann_json::nlohmann_json LABELS gpu
              MAIN ${gpu_main})
  tp_add_test(cuda_engine_test SOURCES cuda_engine_test.cc LIBS tpserve_launch tpserve_cuda LABELS gpu
              MAIN ${gpu_main})
  # The sm_90a wgmma prefill kernel has not yet run on a GPU: its test is a process of its
  # own, so that a crash there costs none of the other attention results.
  set_tests_properties(cuda_attention_test PROPERTIES ENVIRONMENT "GTEST_FILTER=-*Wgmma*")
  add_test(NAME cuda_attention_wgmma_test COMMAND cuda_attention_test --gtest_filter=*Wgmma*)
  set_tests_properties(cuda_attention_wgmma_test PROPERTIES LABELS gpu)
  # Each runs in seconds on a GPU: 120 s means a hang, and a hang must not eat a GPU lease.
  foreach(t cuda_elementwise_test cuda_attention_test cuda_attention_wgmma_test cuda_linear_test cuda_sampling_test
            cuda_communicator_test cuda_graph_test cuda_model_test cuda_engine_test)
    set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
  endforeach()
endif()
