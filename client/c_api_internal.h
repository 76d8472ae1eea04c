// What the files of the C API (c_api.cc, c_api_by_name.cc) share: the
// handles' definitions and the error reporting behind shelf_last_error().
// Internal to libshelf.
#ifndef SHELF_CLIENT_C_API_INTERNAL_H_
#define SHELF_CLIENT_C_API_INTERNAL_H_

#include <memory>
#include <string>

#include "shelf/client.h"
#include "shelf/shelf.h"

struct shelf_options {
  shelf::ClientOptions options;
};

struct shelf_client {
  std::unique_ptr<shelf::Client> client;
};

namespace shelf::c_api {

// Sets the calling thread's last error to `message`; returns `code`.
int Fail(StatusCode code, std::string message);
// Records a failed status's message; returns its code.
int Report(const Status& s);

ClientOptions& Options(shelf_options_t* options);

// Appends `text` as a JSON string literal (the JSON answers of
// shelf_locate and shelf_mc_batch_get_replica_desc).
void AppendJsonString(std::string* out, const std::string& text);
ClientStats Stats(const shelf_client_t* client);

}  // namespace shelf::c_api

#endif  // SHELF_CLIENT_C_API_INTERNAL_H_
