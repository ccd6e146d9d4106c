# tpbench's pure core (records, metrics, report): no network, no server.
tp_add_test(tpbench_core_test SOURCES tpbench_core_test.cc LIBS tpbench_core)
