// The headers most tests include and that cost the most to parse, compiled
// once for all of them (SHELF_TEST_PCH in cmake/ShelfHelpers.cmake). Only
// headers from outside the tree and the protocol's generated code belong
// here: a header of ours would rebuild every test whenever it changed.
// A test still includes what it uses; this header only makes it faster.
#ifndef SHELF_TESTS_TEST_PCH_H_
#define SHELF_TESTS_TEST_PCH_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/shelf.grpc.pb.h"

#endif  // SHELF_TESTS_TEST_PCH_H_
