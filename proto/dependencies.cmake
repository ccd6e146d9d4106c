# Finds what the gRPC and HTTP front ends need (Debian: libgrpc++-dev, libprotobuf-dev,
# protobuf-compiler, protobuf-compiler-grpc, libcpp-httplib-dev) and sets
# TPSERVE_HAVE_SERVING. Included from the top-level CMakeLists.txt so that the imported
# targets are visible in every directory.
set(TPSERVE_HAVE_SERVING OFF)
if(NOT TPSERVE_SERVING STREQUAL "OFF")
  find_package(Protobuf QUIET)
  find_package(gRPC CONFIG QUIET)
  find_program(TPSERVE_GRPC_CPP_PLUGIN grpc_cpp_plugin)
  pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET cpp-httplib)
  if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE AND gRPC_FOUND AND TPSERVE_GRPC_CPP_PLUGIN
     AND HTTPLIB_FOUND)
    set(TPSERVE_HAVE_SERVING ON)
  elseif(TPSERVE_SERVING STREQUAL "ON")
    message(FATAL_ERROR "TPSERVE_SERVING=ON but gRPC, Protobuf, grpc_cpp_plugin or cpp-httplib "
                        "is missing; run tools/setup.sh")
  endif()
endif()
message(STATUS "tpserve: SERVING=${TPSERVE_HAVE_SERVING} (gRPC and OpenAI HTTP front ends)")
