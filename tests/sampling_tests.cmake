# Sampling tests: CPU only, no fixtures. sampling_params_test: validation messages and
# host logprobs; stop_checker_test: stop strings and stop tokens over text deltas.
tp_add_test(sampling_params_test SOURCES sampling_params_test.cc LIBS tpserve_engine_core)
tp_add_test(stop_checker_test SOURCES stop_checker_test.cc LIBS tpserve_serving_engine)
