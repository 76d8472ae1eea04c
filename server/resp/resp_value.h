// How shelf-resp keeps a Redis value in a Shelf block, the one codec both
// GET paths (a single command and a pipelined run) and every other reader
// and writer of values use.
//
// A value is stored as one block: the value's bytes followed by one trailer
// byte, kValueTrailer. The trailer lets an empty Redis value live in a block
// (Shelf blocks are 1 byte or more) and tells a block written through
// shelf-resp from one written by another client, which a read refuses.
//
//   EncodeValue(&value);                         // then Put(value)
//   Status s = DecodeValue(client->Get(key, &block), &block);
//   if (!s.ok() && s.code() != StatusCode::kNotFound) reply(ValueErrorText(s));
#ifndef SHELF_SERVER_RESP_RESP_VALUE_H_
#define SHELF_SERVER_RESP_RESP_VALUE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "server/resp/resp_parser.h"
#include "shelf/status.h"

namespace shelf::resp {

inline constexpr char kValueTrailer = '\x01';

// The block for `value`, in place: the trailer appended (in the spare
// capacity the parser reserved, so no copy).
inline void EncodeValue(std::string* value) { value->push_back(kValueTrailer); }
// The block for a command's value, in place: in its placed memory when the
// parser placed it (`placed` non-null and not empty), else in `arg`.
inline absl::string_view EncodeValue(std::string* arg, PlacedValue* placed) {
  if (placed != nullptr && *placed) {
    placed->data()[placed->size++] = kValueTrailer;  // the spare byte
    return absl::string_view(placed->data(), placed->size);
  }
  EncodeValue(arg);
  return *arg;
}

// The value in `block`, read with status `read`, in place. A failed read
// is returned as it is (kNotFound: the key is absent); a block that does
// not end in the trailer was not written through shelf-resp and is
// FAILED_PRECONDITION, `block` cleared.
Status DecodeValue(const Status& read, std::string* block);
// The same for a block of `block_size` bytes at `block`, left where it is:
// *value_size gets the value's length (the block's without its trailer).
Status DecodeValue(const Status& read, const char* block, size_t block_size, size_t* value_size);

// The error line a failed DecodeValue other than kNotFound answers:
// "WRONGTYPE ..." for a block of another client, else the status itself
// ("ERR ...", "OOM ...").
std::string ValueErrorText(const Status& s);

}  // namespace shelf::resp

#endif  // SHELF_SERVER_RESP_RESP_VALUE_H_
