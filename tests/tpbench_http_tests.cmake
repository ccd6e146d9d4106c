# tpbench's OpenAI HTTP(S) target against an in-process cpp-httplib server on loopback.
# Needs libcurl (tpbench_http) and cpp-httplib, which is found with the serving front ends
# (proto/dependencies.cmake).
if(TARGET tpbench_http AND TARGET PkgConfig::HTTPLIB)
  tp_add_test(tpbench_http_test SOURCES tpbench_http_test.cc
              LIBS tpbench_http PkgConfig::HTTPLIB absl::synchronization absl::time GTest::gmock)
endif()
