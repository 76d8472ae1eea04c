// A ZMQ SUB socket read on a thread of its own, for the benches that follow
// the master's KV event stream (events_bench.cc, router_view_bench.cc),
// and msgpack-c (without Boost) to decode its batches.
//
//   SubscriberThread sub(endpoint, "kv@", [&](const std::vector<std::string>& frames) {
//     ...  // [topic, sequence, payload], on the subscriber's thread
//   });
//
// Nothing is dropped on the subscriber's side (no receive high-water mark):
// a bench that counts events must see every one the master sent. The
// destructor stops the thread before it returns, so `on_message` may use
// state that outlives the SubscriberThread.
#ifndef SHELF_TOOLS_BENCH_BENCH_ZMQ_H_
#define SHELF_TOOLS_BENCH_BENCH_ZMQ_H_

#include <zmq.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST
#endif
#include <msgpack.hpp>

namespace shelf::bench {

class SubscriberThread {
 public:
  using OnMessage = std::function<void(const std::vector<std::string>& frames)>;

  SubscriberThread(const std::string& endpoint, const std::string& topic, OnMessage on_message)
      : on_message_(std::move(on_message)) {
    ctx_ = zmq_ctx_new();
    sub_ = zmq_socket(ctx_, ZMQ_SUB);
    int hwm = 0;
    zmq_setsockopt(sub_, ZMQ_RCVHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(sub_, ZMQ_SUBSCRIBE, topic.data(), topic.size());
    zmq_connect(sub_, endpoint.c_str());
    thread_ = std::thread([this] { Run(); });
  }
  ~SubscriberThread() {
    stop_.store(true);
    thread_.join();
    zmq_close(sub_);
    zmq_ctx_term(ctx_);
  }
  SubscriberThread(const SubscriberThread&) = delete;
  SubscriberThread& operator=(const SubscriberThread&) = delete;

 private:
  void Run() {
    int timeout_ms = 50;  // how soon the destructor is heard
    zmq_setsockopt(sub_, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    std::vector<std::string> frames;
    while (!stop_.load()) {
      frames.clear();
      while (true) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, sub_, 0) < 0) {
          zmq_msg_close(&msg);
          break;
        }
        frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
        bool more = zmq_msg_more(&msg);
        zmq_msg_close(&msg);
        if (!more) break;
      }
      if (frames.size() == 3) on_message_(frames);
    }
  }

  const OnMessage on_message_;
  void* ctx_ = nullptr;
  void* sub_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_BENCH_ZMQ_H_
