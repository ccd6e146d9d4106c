# tpbench's OpenAI HTTP(S) target against an in-process cpp-httplib server on loopback.
# Needs cpp-httplib, found with the serving front ends (TPSERVE_HAVE_SERVING,
# proto/dependencies.cmake), and libcurl (tpbench_http exists where bench/tpbench found it).
if(TPSERVE_HAVE_SERVING AND TARGET tpbench_http)
  tp_add_test(tpbench_http_test SOURCES tpbench_http_test.cc
              LIBS tpbench_http PkgConfig::HTTPLIB absl::synchronization absl::time GTest::gmock)
endif()
