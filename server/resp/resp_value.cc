#include "server/resp/resp_value.h"

#include "server/resp/resp_command_table.h"

namespace shelf::resp {

namespace {

constexpr char kForeignBlock[] = "WRONGTYPE block was not written through shelf-resp";

}  // namespace

Status DecodeValue(const Status& read, std::string* block) {
  if (!read.ok()) return read;
  if (block->empty() || block->back() != kValueTrailer) {
    block->clear();
    return Status(StatusCode::kFailedPrecondition, kForeignBlock);
  }
  block->pop_back();
  return Status::Ok();
}

Status DecodeValue(const Status& read, const char* block, size_t block_size, size_t* value_size) {
  *value_size = 0;
  if (!read.ok()) return read;
  if (block_size == 0 || block[block_size - 1] != kValueTrailer) {
    return Status(StatusCode::kFailedPrecondition, kForeignBlock);
  }
  *value_size = block_size - 1;
  return Status::Ok();
}

std::string ValueErrorText(const Status& s) {
  if (s.code() == StatusCode::kFailedPrecondition && s.message() == kForeignBlock) {
    return s.message();
  }
  return internal::ErrorText(s);
}

}  // namespace shelf::resp
