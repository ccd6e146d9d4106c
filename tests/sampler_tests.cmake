# Sampler tests: CPU only, no fixtures. sampler_test checks distributions with
# chi-square tests over fixed seeds, so it is deterministic.
tp_add_test(sampler_test SOURCES sampler_test.cc LIBS tpserve_sampler)
tp_add_test(stop_checker_test SOURCES stop_checker_test.cc LIBS tpserve_sampler)
