# tpbench end to end against `tpserve serve` (2 ranks under mpirun): gRPC, HTTP, faults,
# report. Needs MPI, the serving build (gRPC, httplib: TPSERVE_HAVE_SERVING) and libcurl
# (the tpbench executable exists where bench/tpbench found it).
if(MPI_CXX_FOUND AND TPSERVE_HAVE_SERVING AND TARGET tpbench)
  add_test(NAME tpbench_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tpbench_test.sh $<TARGET_FILE:tpserve>
           $<TARGET_FILE:tpbench> ${TPSERVE_FIXTURES})
  set_tests_properties(tpbench_test PROPERTIES TIMEOUT 600 LABELS mpi RUN_SERIAL TRUE)
endif()

# The load generator against a fake target, and the workloads.
tp_add_test(tpbench_load_test SOURCES tpbench_load_test.cc LIBS tpbench_load)

# The HTTP front end under load: 256 keep-alive streams (tpbench) beside 70 slow-header
# clients, and rounds of client disconnects at 2 and 4 ranks.
if(TARGET tpbench AND MPI_CXX_FOUND AND TPSERVE_HAVE_SERVING)
  add_test(NAME serve_load_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_load_test.sh $<TARGET_FILE:tpserve>
           $<TARGET_FILE:tpbench> ${TPSERVE_FIXTURES})
  set_tests_properties(serve_load_test PROPERTIES TIMEOUT 600 LABELS mpi RUN_SERIAL TRUE)
endif()
