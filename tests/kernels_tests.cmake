# CPU kernel tests, include()d by tests/CMakeLists.txt.
tp_add_test(cpu_kernels_test SOURCES cpu_kernels_test.cc LIBS tpserve_kernels_cpu)
tp_add_test(cpu_attention_test SOURCES cpu_attention_test.cc LIBS tpserve_kernels_cpu)
tp_add_test(cpu_sampling_test SOURCES cpu_sampling_test.cc LIBS tpserve_kernels_cpu)
tp_add_test(quant_linear_test SOURCES quant_linear_test.cc LIBS tpserve_kernels_cpu)
tp_add_test(quant_kernels_test SOURCES quant_kernels_test.cc LIBS tpserve_kernels_cpu)
tp_add_test(amx_tiles_test SOURCES amx_tiles_test.cc LIBS tpserve_kernels_cpu)
