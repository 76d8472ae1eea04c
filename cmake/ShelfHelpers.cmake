# One helper declares every library, one every binary, one every test, so
# flags, include roots and warnings are the same everywhere.
#
#   shelf_cc_library(NAME shelf_common HDRS a.h SRCS a.cc DEPS absl::status)
#   shelf_cc_binary(NAME shelf-master SRCS main.cc DEPS shelf_master)
#   shelf_cc_test(NAME allocator_test SRCS allocator_test.cc DEPS shelf_storage
#                 LABELS unit)
# -Wshadow: a name declared again in an inner scope (a parameter naming a
# member, a lambda's local naming the enclosing one) reads as the outer one
# and is not. -Wnon-virtual-dtor: a class with virtual functions deleted
# through a base pointer must have a virtual destructor (C++ only).
set(SHELF_WARNINGS -Wall -Wextra -Wshadow $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
    -Wno-unused-parameter -Wno-missing-field-initializers)
if(SHELF_WERROR)
  list(APPEND SHELF_WARNINGS -Werror)
endif()
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # The tree is C++17: designated initialisers ({.field = x}) are C++20,
  # which clang accepts as an extension unless told.
  list(APPEND SHELF_WARNINGS -Wthread-safety -Wc++20-designator)
endif()

# A library exports only its own headers. Each gets an include root of its
# own, <build>/hdrs/<library>/, holding a link to each of its HDRS at the
# header's path in the tree (the way Bazel's virtual includes work), so
# "common/log.h" resolves for shelf_common and for whoever depends on it,
# and for nobody else: a source that includes a header of a library it does
# not depend on fails to compile. The SDK's public headers (client/include/,
# common/include/) are found through their own include folders; the build
# tree (generated protobuf headers) comes only from the proto libraries
# (shelf_proto_library), to whoever depends on them.
function(shelf_link_headers root)
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root})
  foreach(hdr ${ARGN})
    get_filename_component(abs ${hdr} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${abs})
    if(rel MATCHES "^(client|common)/include/")
      continue()
    endif()
    get_filename_component(dir ${root}/${rel} DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    file(CREATE_LINK ${abs} ${root}/${rel} SYMBOLIC)
  endforeach()
endfunction()

function(shelf_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "HDRS;SRCS;DEPS;DEFINES" ${ARGN})
  set(root ${PROJECT_BINARY_DIR}/hdrs/${ARG_NAME})
  shelf_link_headers(${root} ${ARG_HDRS})
  if(ARG_SRCS)
    add_library(${ARG_NAME} STATIC ${ARG_SRCS} ${ARG_HDRS})
    target_compile_options(${ARG_NAME} PRIVATE ${SHELF_WARNINGS})
    target_include_directories(${ARG_NAME} PUBLIC ${root})
    target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS})
    target_compile_definitions(${ARG_NAME} PUBLIC ${ARG_DEFINES})
  else()
    add_library(${ARG_NAME} INTERFACE)
    target_include_directories(${ARG_NAME} INTERFACE ${root})
    target_link_libraries(${ARG_NAME} INTERFACE ${ARG_DEPS})
    target_compile_definitions(${ARG_NAME} INTERFACE ${ARG_DEFINES})
  endif()
endfunction()

# An include root ROOT that holds one folder of the tree (FOLDER, relative
# to the source root) at its path: ROOT/FOLDER links to the folder.
function(shelf_link_folder root folder)
  file(REMOVE_RECURSE ${root})
  get_filename_component(parent ${root}/${folder} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
endfunction()

# A binary, a test or a Python module sees, besides its dependencies'
# headers, the headers of its own folder: <build>/hdrs/<target>/<FOLDER>.
function(shelf_see_own_folder target folder)
  shelf_link_folder(${PROJECT_BINARY_DIR}/hdrs/${target} ${folder})
  target_include_directories(${target} PRIVATE ${PROJECT_BINARY_DIR}/hdrs/${target})
endfunction()

function(shelf_cc_binary)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_compile_options(${ARG_NAME} PRIVATE ${SHELF_WARNINGS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  shelf_see_own_folder(${ARG_NAME} ${folder})
endfunction()

# Tests find the binaries and the sources through testing/test_paths.h:
# SHELF_BIN_DIR and SHELF_SOURCE_DIR in their environment under CTest, else
# the build's own folders.
function(shelf_test_executable name)
  add_executable(${name} ${ARGN})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_compile_options(${name} PRIVATE ${SHELF_WARNINGS})
  # clang stamps a precompiled header with the time it was built, which
  # ccache cannot cache; without the stamp it can.
  if(SHELF_TEST_PCH AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${name} PRIVATE -Xclang -fno-pch-timestamp)
  endif()
  target_link_libraries(${name} PRIVATE shelf_test_paths GTest::gtest GTest::gtest_main)
  # Every test sees tests/ (the fixtures tests share), one link for all.
  target_include_directories(${name} PRIVATE ${PROJECT_BINARY_DIR}/hdrs/shelf_tests)
  if(SHELF_TEST_PCH)
    # What the precompiled header was built with, in every test: the
    # generated protocol headers' folder and -pthread (_REENTRANT).
    target_include_directories(${name} PRIVATE ${PROJECT_BINARY_DIR})
    target_compile_options(${name} PRIVATE -pthread)
  endif()
endfunction()

# Every test compiles against one precompiled header (tests/test_pch.h,
# built once by shelf_test_pch in tests/CMakeLists.txt): parsing gtest,
# gRPC and the protocol's generated code was a third of each test's
# compilation. SHELF_TEST_PCH=OFF compiles each test from its own includes.
option(SHELF_TEST_PCH "Compile the tests against one precompiled header" ON)

function(shelf_cc_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  shelf_test_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS})
  if(SHELF_TEST_PCH)
    target_precompile_headers(${ARG_NAME} REUSE_FROM shelf_test_pch)
  endif()
  add_test(NAME ${ARG_NAME} COMMAND ${ARG_NAME})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}"
      ENVIRONMENT "SHELF_BIN_DIR=${CMAKE_BINARY_DIR}/bin;SHELF_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# Compiles .proto files with protoc and gRPC's C++ plugin into one static
# library. PROTOS are paths relative to IMPORT_ROOT (protoc's --proto_path);
# each lands at OUT_DIR/<path>.pb.{h,cc} and .grpc.pb.{h,cc}. Generated code
# is built without the project's warning flags. Every file of the set is a
# dependency of each, so an edit to an imported file regenerates importers.
#   shelf_proto_library(NAME shelf_proto IMPORT_ROOT ${CMAKE_CURRENT_SOURCE_DIR}
#                       OUT_DIR ${PROJECT_BINARY_DIR}/proto PROTOS shelf.proto)
function(shelf_proto_library)
  cmake_parse_arguments(ARG "" "NAME;IMPORT_ROOT;OUT_DIR" "PROTOS" ${ARGN})
  set(srcs)
  set(hdrs)
  set(inputs)
  foreach(proto ${ARG_PROTOS})
    list(APPEND inputs ${ARG_IMPORT_ROOT}/${proto})
  endforeach()
  foreach(proto ${ARG_PROTOS})
    string(REGEX REPLACE "\\.proto$" "" stem ${proto})
    get_filename_component(dir ${ARG_OUT_DIR}/${stem} DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    set(gen ${ARG_OUT_DIR}/${stem}.pb.cc ${ARG_OUT_DIR}/${stem}.grpc.pb.cc)
    set(hdr ${ARG_OUT_DIR}/${stem}.pb.h ${ARG_OUT_DIR}/${stem}.grpc.pb.h)
    add_custom_command(
      OUTPUT ${gen} ${hdr}
      COMMAND protobuf::protoc
        --proto_path=${ARG_IMPORT_ROOT}
        --cpp_out=${ARG_OUT_DIR} --grpc_out=${ARG_OUT_DIR}
        --plugin=protoc-gen-grpc=${GRPC_CPP_PLUGIN}
        ${ARG_IMPORT_ROOT}/${proto}
      DEPENDS ${inputs}
      COMMENT "protoc ${proto}")
    list(APPEND srcs ${gen})
    list(APPEND hdrs ${hdr})
  endforeach()
  add_library(${ARG_NAME} STATIC ${srcs} ${hdrs})
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_BINARY_DIR})
  target_link_libraries(${ARG_NAME} PUBLIC protobuf::libprotobuf gRPC::grpc++)
endfunction()

# Adds every direct subfolder of the current folder that has a CMakeLists.txt,
# so a new test folder needs no edit elsewhere.
function(shelf_add_subdirectories)
  file(GLOB children LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}
       ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT children)
  foreach(child ${children})
    if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${child}
       AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${child}/CMakeLists.txt)
      add_subdirectory(${child})
    endif()
  endforeach()
endfunction()
