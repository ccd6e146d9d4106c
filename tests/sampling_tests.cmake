# Sampling tests: CPU only. sampling_params_test: validation messages and host logprobs;
# generation_defaults_test: the model's sampling defaults (--generation-config; reads the
# fixture models' generation_config.json); stop_checker_test: stop strings and stop tokens
# over text deltas.
tp_add_test(sampling_params_test SOURCES sampling_params_test.cc LIBS tpserve_engine_core tpserve_structured_output)
tp_add_test(generation_defaults_test SOURCES generation_defaults_test.cc LIBS tpserve_request GTest::gmock)
tp_add_test(stop_checker_test SOURCES stop_checker_test.cc LIBS tpserve_serving_engine)
