# tpbench's pure core (records, metrics, report): no network, no server.
tp_add_test(tpbench_core_test SOURCES tpbench_core_test.cc LIBS tpbench_core)
# tpbench compare's prices, cost, output agreement and summary: no network, no server.
tp_add_test(tpbench_compare_test SOURCES tpbench_compare_test.cc LIBS tpbench_compare)
