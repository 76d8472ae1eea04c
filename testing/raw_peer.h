// What attack tests use to be a raw TCP peer of a daemon: a connection
// from a chosen loopback source address, a check of whether the daemon has
// closed it, and one sample read out of a /metrics page.
//
//   int fd = ConnectFrom(2, port);           // from 127.0.0.2
//   ... the daemon refuses or closes it ...
//   EXPECT_TRUE(PeerClosed(fd));
//   double n = MetricValue(HttpGet(metrics_port, "/metrics"),
//                          "shelf_master_connections_refused_total{rule=\"source_share\"}");
#ifndef SHELF_TESTING_RAW_PEER_H_
#define SHELF_TESTING_RAW_PEER_H_

#include <cstdint>
#include <string>

namespace shelf {

// A TCP connection to 127.0.0.1:`port` from 127.0.0.<source>; -1 on
// failure.
int ConnectFrom(int source, uint16_t port);

// True once the peer has closed `fd` (reads and drops what it sent);
// never blocks.
bool PeerClosed(int fd);

// The value of the sample whose name and labels are `series` exactly
// (`name{label="value"}` or a bare name) in a text exposition; 0 when
// absent.
double MetricValue(const std::string& metrics, const std::string& series);

}  // namespace shelf

#endif  // SHELF_TESTING_RAW_PEER_H_
