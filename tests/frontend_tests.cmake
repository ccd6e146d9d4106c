# Front-end tests: RequestStream always; with serving built, the metrics registry, the
# OpenAI JSON layer (no sockets), the HTTP transport on raw sockets, and both servers on
# loopback ports with a fake engine.
tp_add_test(request_stream_test SOURCES request_stream_test.cc LIBS tpserve_request)
if(TPSERVE_HAVE_SERVING)
  tp_add_test(http_transport_test SOURCES http_transport_test.cc LIBS tpserve_frontend GTest::gmock)
  tp_add_test(task_pool_test SOURCES task_pool_test.cc LIBS tpserve_frontend)
  tp_add_test(api_keys_test SOURCES api_keys_test.cc LIBS tpserve_frontend GTest::gmock)
  tp_add_test(choice_streams_test SOURCES choice_streams_test.cc LIBS tpserve_frontend GTest::gmock)
  tp_add_test(choice_tool_calls_test SOURCES choice_tool_calls_test.cc LIBS tpserve_frontend)
  tp_add_test(metrics_test SOURCES metrics_test.cc LIBS tpserve_frontend GTest::gmock)
  tp_add_test(openai_json_test SOURCES openai_json_test.cc LIBS tpserve_frontend GTest::gmock)
  tp_add_test(generate_proto_test SOURCES generate_proto_test.cc LIBS tpserve_frontend GTest::gmock)
  tp_add_test(grpc_server_start_test SOURCES grpc_server_start_test.cc
              LIBS tpserve_frontend tpserve_health_proto GTest::gmock)
  tp_add_test(frontend_test SOURCES frontend_test.cc frontend_http_test.cc
              LIBS tpserve_frontend tpserve_client_command tpserve_health_proto tpserve_reflection_client_proto PkgConfig::HTTPLIB
                   GTest::gmock)
endif()

# `tpserve router`: its config and routing policies (no sockets), always; its metrics (no
# sockets), its backend client against a scripted loopback server, its relay to grpc://
# backends (no sockets, then in one process against serve's servers on a fake engine), and
# the router in front of real `tpserve serve` processes, with serving built.
tp_add_test(router_config_test SOURCES router_config_test.cc LIBS tpserve_router_config GTest::gmock)
if(TPSERVE_HAVE_SERVING)
  tp_add_test(router_metrics_test SOURCES router_metrics_test.cc LIBS tpserve_router GTest::gmock)
  tp_add_test(upstream_call_test SOURCES upstream_call_test.cc LIBS tpserve_router GTest::gmock)
  tp_add_test(stream_usage_test SOURCES stream_usage_test.cc LIBS tpserve_router GTest::gmock)
  tp_add_test(grpc_relay_test SOURCES grpc_relay_test.cc LIBS tpserve_router GTest::gmock)
  tp_add_test(router_grpc_to_openai_test SOURCES router_grpc_to_openai_test.cc LIBS tpserve_router GTest::gmock)
  tp_add_test(router_grpc_test SOURCES router_grpc_test.cc LIBS tpserve_router PkgConfig::HTTPLIB GTest::gmock)
  # The router's own gRPC port in front of serve's gRPC server on a fake engine.
  tp_add_test(router_grpc_front_test SOURCES router_grpc_front_test.cc
              LIBS tpserve_router tpserve_health_proto PkgConfig::HTTPLIB GTest::gmock)
  # With tpbench built (it needs libcurl), the test also benchmarks through a router: tpbench run's
  # per-backend split and tpbench compare of two models.
  set(ROUTER_TEST_TPBENCH "")
  if(TARGET tpbench)
    set(ROUTER_TEST_TPBENCH $<TARGET_FILE:tpbench>)
  endif()
  # The router's shell tests: real processes (tpserve router and serve replicas), one at a time.
  function(tp_add_router_shell_test name script)
    add_test(NAME ${name} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/${script} $<TARGET_FILE:tpserve> ${ARGN})
    set_tests_properties(${name} PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE)
  endfunction()
  tp_add_router_shell_test(router_test router_test.sh ${TPSERVE_FIXTURES} ${ROUTER_TEST_TPBENCH})
  tp_add_router_shell_test(router_tls_test router_tls_test.sh ${TPSERVE_FIXTURES})
  # TLS on serve's and the router's gRPC ports, and grpcs:// backends.
  tp_add_router_shell_test(router_grpc_tls_test grpc_tls_test.sh ${TPSERVE_FIXTURES})
  tp_add_router_shell_test(router_health_test router_health_test.sh ${TPSERVE_FIXTURES})
  tp_add_router_shell_test(router_grpc_test_sh router_grpc_test.sh ${TPSERVE_FIXTURES})
  tp_add_router_shell_test(router_grpc_front_test_sh router_grpc_front_test.sh ${TPSERVE_FIXTURES})
  tp_add_router_shell_test(router_grpc_only_test router_grpc_only_test.sh ${TPSERVE_FIXTURES})
  tp_add_router_shell_test(router_knobs_test router_knobs_test.sh)
endif()
