# Fuzz targets (tests/fuzz/README.md). With TPSERVE_FUZZ=ON (clang) each is a libFuzzer
# binary <name>_fuzzer; otherwise <name>_replay runs the target once per input through
# tests/fuzz/replay_main.cc. Either way ctest's <name>_replay replays the committed corpus
# (tests/fuzz/corpus/<name>/) and crash reproducers (tests/fuzz/regressions/<name>/).
set(TPSERVE_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)

# tp_add_fuzz_target(NAME LIBS x y)
function(tp_add_fuzz_target name)
  cmake_parse_arguments(F "" "" "LIBS" ${ARGN})
  set(inputs ${TPSERVE_FUZZ_DIR}/corpus/${name} ${TPSERVE_FUZZ_DIR}/regressions/${name})
  if(TPSERVE_FUZZ)
    set(exe ${name}_fuzzer)
    add_executable(${exe} ${TPSERVE_FUZZ_DIR}/${name}_fuzzer.cc)
    target_link_options(${exe} PRIVATE -fsanitize=fuzzer)
    # -runs=0: execute the inputs once, do not fuzz.
    add_test(NAME ${name}_replay COMMAND ${exe} -runs=0 -rss_limit_mb=2048 ${inputs})
  else()
    set(exe ${name}_replay)
    add_executable(${exe} ${TPSERVE_FUZZ_DIR}/${name}_fuzzer.cc ${TPSERVE_FUZZ_DIR}/replay_main.cc)
    add_test(NAME ${name}_replay COMMAND ${exe} ${inputs})
  endif()
  target_link_libraries(${exe} PRIVATE ${F_LIBS})
  target_compile_definitions(${exe} PRIVATE TPSERVE_FIXTURES="${TPSERVE_FIXTURES}")
  set_tests_properties(${name}_replay PROPERTIES TIMEOUT 120 LABELS fuzz)
endfunction()

tp_add_fuzz_target(tokenizer LIBS tpserve_tokenizer)
tp_add_fuzz_target(chat_template LIBS tpserve_chat_template)
if(TPSERVE_HAVE_SERVING)
  tp_add_fuzz_target(openai_request LIBS tpserve_frontend)
endif()
