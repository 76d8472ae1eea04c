// What tests use to reach the processes they start over HTTP: a free
// loopback port to give a --metrics-listen, and a plain GET of a path.
//
//   uint16_t port = FreePort();
//   ... start a store with --metrics-listen 127.0.0.1:<port> ...
//   std::string metrics = HttpGet(port, "/metrics");
#ifndef SHELF_TESTING_HTTP_PROBE_H_
#define SHELF_TESTING_HTTP_PROBE_H_

#include <cstdint>
#include <string>

namespace shelf {

// A loopback TCP port nobody listens on at the time of the call; 0 when
// the system gives none.
uint16_t FreePort();

// An HTTP/1.0 GET of `path` from 127.0.0.1:`port`; returns the body, ""
// on failure. `status`, when given, gets the response's status code (0
// when none came).
std::string HttpGet(uint16_t port, const std::string& path, int* status = nullptr);

}  // namespace shelf

#endif  // SHELF_TESTING_HTTP_PROBE_H_
