# Finds what the gRPC and HTTP front ends need (Debian: libgrpc++-dev, libprotobuf-dev,
# protobuf-compiler, protobuf-compiler-grpc, libboost-dev for Beast/Asio (the HTTP server),
# libcpp-httplib-dev (HTTP clients: `tpserve client`, tests), libssl-dev (the router's
# https:// backends)) and sets
# TPSERVE_HAVE_SERVING. Included from the top-level CMakeLists.txt so that the imported
# targets are visible in every directory.
set(TPSERVE_HAVE_SERVING OFF)
if(NOT TPSERVE_SERVING STREQUAL "OFF")
  find_package(Protobuf QUIET)
  find_package(gRPC CONFIG QUIET)
  find_program(TPSERVE_GRPC_CPP_PLUGIN grpc_cpp_plugin)
  pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET cpp-httplib)
  find_package(Boost 1.74 QUIET CONFIG)  # header-only: Asio and Beast
  find_package(OpenSSL QUIET)
  if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE AND gRPC_FOUND AND TPSERVE_GRPC_CPP_PLUGIN
     AND HTTPLIB_FOUND AND Boost_FOUND AND OpenSSL_FOUND)
    set(TPSERVE_HAVE_SERVING ON)
  elseif(TPSERVE_SERVING STREQUAL "ON")
    message(FATAL_ERROR "TPSERVE_SERVING=ON but gRPC, Protobuf, grpc_cpp_plugin, Boost, OpenSSL or cpp-httplib "
                        "is missing; run tools/setup.sh")
  endif()
endif()
message(STATUS "tpserve: SERVING=${TPSERVE_HAVE_SERVING} (gRPC and OpenAI HTTP front ends)")
