# Finds every dependency from Debian 12 packages (deploy/install-deps.sh).
# Nothing is downloaded. CUDA is optional and detected, never required.
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)            # FindProtobuf: Debian ships no config
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(RocksDB CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)  # nlohmann-json3-dev: common/json.h
# civetweb's Debian config package names /usr/bin/civetweb, which only the
# separate `civetweb` package ships; find the library directly instead.
find_path(CIVETWEB_INCLUDE_DIR civetweb.h REQUIRED)
find_library(CIVETWEB_LIBRARY civetweb REQUIRED)
add_library(shelf_civetweb INTERFACE)
target_include_directories(shelf_civetweb INTERFACE ${CIVETWEB_INCLUDE_DIR})
target_link_libraries(shelf_civetweb INTERFACE ${CIVETWEB_LIBRARY})
find_package(OpenSSL REQUIRED)
find_package(PkgConfig REQUIRED)
# prometheus-cpp (prometheus-cpp-dev): the metrics registry and text
# serializer. Core only: the daemons serve /metrics through common/http_server
# (civetweb), and engines linking libshelf must not pull an HTTP server. Found
# through pkg-config because the package's CMake config also requires the
# civetweb config (see above) and CURL for the pull and push parts.
pkg_check_modules(PROMETHEUS_CPP_CORE REQUIRED IMPORTED_TARGET prometheus-cpp-core)
pkg_check_modules(IBVERBS IMPORTED_TARGET libibverbs)
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY xxhash REQUIRED)
add_library(shelf_xxhash INTERFACE)
target_include_directories(shelf_xxhash INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(shelf_xxhash INTERFACE ${XXHASH_LIBRARY})
# Debian's libxxhash is built with xxh_x86dispatch.c: XXH3 with the widest
# vector unit of the CPU it runs on (common/checksum.cc).
include(CheckSymbolExists)
set(CMAKE_REQUIRED_LIBRARIES ${XXHASH_LIBRARY})
set(CMAKE_REQUIRED_INCLUDES ${XXHASH_INCLUDE_DIR})
check_symbol_exists(XXH3_64bits_update_dispatch "xxh_x86dispatch.h" SHELF_HAVE_XXH3_DISPATCH)
unset(CMAKE_REQUIRED_LIBRARIES)
unset(CMAKE_REQUIRED_INCLUDES)
# The master's KV event stream (docs/events.md): libzmq (libzmq3-dev) for
# its PUB and ROUTER sockets, msgpack-c's header-only C++ packer
# (libmsgpack-cxx-dev). Found directly: the msgpack package's CMake config
# requires Boost, which the packer does not need (MSGPACK_NO_BOOST).
pkg_check_modules(ZMQ IMPORTED_TARGET libzmq)
if(NOT ZMQ_FOUND)
  message(FATAL_ERROR "libzmq not found: install libzmq3-dev (deploy/install-deps.sh)")
endif()
add_library(shelf_zmq INTERFACE)
target_link_libraries(shelf_zmq INTERFACE PkgConfig::ZMQ)
find_path(MSGPACK_CXX_INCLUDE_DIR msgpack.hpp)
if(NOT MSGPACK_CXX_INCLUDE_DIR)
  message(FATAL_ERROR "msgpack.hpp not found: install libmsgpack-cxx-dev (deploy/install-deps.sh)")
endif()
add_library(shelf_msgpack INTERFACE)
target_include_directories(shelf_msgpack INTERFACE ${MSGPACK_CXX_INCLUDE_DIR})
target_compile_definitions(shelf_msgpack INTERFACE MSGPACK_NO_BOOST)
# RE2 (libre2-dev): the master's regex patterns (ListKeys, RemoveMatching),
# matched in linear time whatever the pattern (server/master/key_matcher.h).
pkg_check_modules(RE2 IMPORTED_TARGET re2)
if(NOT RE2_FOUND)
  message(FATAL_ERROR "re2 not found: install libre2-dev (deploy/install-deps.sh)")
endif()
add_library(shelf_re2 INTERFACE)
target_link_libraries(shelf_re2 INTERFACE PkgConfig::RE2)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

if(SHELF_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()

# CUDA: built when a toolkit is present (/usr/local/cuda or on PATH).
set(SHELF_WITH_CUDA OFF)
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit QUIET)
if(CUDAToolkit_FOUND)
  set(SHELF_WITH_CUDA ON)
  message(STATUS "shelf: CUDA toolkit ${CUDAToolkit_VERSION} found: GPU memory paths enabled")
else()
  message(STATUS "shelf: no CUDA toolkit: GPU memory paths disabled")
endif()
if(IBVERBS_FOUND)
  message(STATUS "shelf: libibverbs found: RDMA backend enabled")
endif()
