#include "bench/internal/zmq_echo.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <glog/logging.h>
#include <zmq.hpp>

namespace relaxps {
namespace bench {
namespace {

void NoFree(void*, void*) {}

// One ROUTER answering until `stop` is set.
class EchoServer {
 public:
  EchoServer(zmq::context_t* ctx, size_t reply_bytes, bool echo)
      : socket_(*ctx, zmq::socket_type::router), reply_(reply_bytes, 0), echo_(echo) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, 100000);
    socket_.set(zmq::sockopt::rcvhwm, 100000);
    socket_.set(zmq::sockopt::rcvtimeo, 50);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { Loop(); });
  }
  ~EchoServer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void Loop() {
    while (!stop_) {
      zmq::message_t id;
      if (!socket_.recv(id, zmq::recv_flags::none)) continue;  // Timeout.
      zmq::message_t payload;
      (void)socket_.recv(payload, zmq::recv_flags::none);
      socket_.send(id, zmq::send_flags::sndmore);
      if (echo_) {
        socket_.send(payload, zmq::send_flags::none);
      } else {
        zmq::message_t reply(reply_.data(), reply_.size(), NoFree, nullptr);
        socket_.send(reply, zmq::send_flags::none);
      }
    }
  }

  zmq::socket_t socket_;
  std::string endpoint_;
  std::vector<char> reply_;
  const bool echo_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct ClientResult {
  Clock::time_point end;  // When the last counted operation completed.
  uint64_t ops = 0;
  uint64_t bytes = 0;
  std::vector<double> latencies_us;
};

class EchoClient {
 public:
  EchoClient(zmq::context_t* ctx, const std::vector<std::string>& endpoints,
             const EchoOptions& options)
      : options_(options) {
    const size_t s = endpoints.size();
    req_part_ = std::max<size_t>(options.request_bytes / s, 1);
    reply_part_ = std::max<size_t>(options.reply_bytes / s, 1);
    send_buf_.assign(req_part_, 1);
    // One receive area per in-flight slot and server (copy variant).
    if (!options.zero_copy) {
      recv_buf_.resize(size_t(options.in_flight) * s);
      for (auto& b : recv_buf_) b.assign(reply_part_, 0);
    }
    for (const auto& ep : endpoints) {
      sockets_.emplace_back(*ctx, zmq::socket_type::dealer);
      auto& sock = sockets_.back();
      sock.set(zmq::sockopt::linger, 0);
      sock.set(zmq::sockopt::sndhwm, 100000);
      sock.set(zmq::sockopt::rcvhwm, 100000);
      sock.connect(ep);
    }
    received_.assign(s, 0);
  }

  // Runs `warmup` untimed ops, waits at `start`, then runs until `deadline`
  // passes and min_ops have completed.
  ClientResult Run(std::atomic<int>* ready, const std::atomic<bool>* go,
                   const std::atomic<bool>* stop) {
    ClientResult r;
    RunOps(options_.warmup_ops, nullptr, nullptr);
    ready->fetch_add(1);
    while (!go->load()) std::this_thread::yield();
    RunOps(-1, stop, &r);
    return r;
  }

 private:
  void SendOp() {
    for (size_t i = 0; i < sockets_.size(); ++i) {
      if (options_.zero_copy) {
        zmq::message_t m(send_buf_.data(), req_part_, NoFree, nullptr);
        sockets_[i].send(m, zmq::send_flags::none);
      } else {
        zmq::message_t m(send_buf_.data(), req_part_);  // Copies.
        sockets_[i].send(m, zmq::send_flags::none);
      }
    }
    send_times_.push_back(Clock::now());
    ++sent_;
  }

  // Waits for and receives the replies available on any socket.
  void ReceiveSome() {
    std::vector<zmq::pollitem_t> items;
    for (auto& s : sockets_) items.push_back({static_cast<void*>(s), 0, ZMQ_POLLIN, 0});
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
    for (size_t i = 0; i < sockets_.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      zmq::message_t m;
      while (sockets_[i].recv(m, zmq::recv_flags::dontwait)) {
        if (!options_.zero_copy) {
          auto& dst = recv_buf_[(received_[i] % options_.in_flight) * sockets_.size() + i];
          std::memcpy(dst.data(), m.data(), std::min(m.size(), dst.size()));
        }
        ++received_[i];
      }
    }
  }

  void RunOps(int count, const std::atomic<bool>* stop, ClientResult* r) {
    const uint64_t first = completed_;
    auto done = [&] {
      const uint64_t n = completed_ - first;
      if (count >= 0) return n >= uint64_t(count);
      return stop->load() && n >= uint64_t(options_.min_ops);
    };
    while (!done()) {
      while (sent_ - completed_ < uint64_t(options_.in_flight) &&
             (count < 0 || sent_ - first < uint64_t(count))) {
        SendOp();
      }
      ReceiveSome();
      const uint64_t now_complete = *std::min_element(received_.begin(), received_.end());
      while (completed_ < now_complete) {
        if (r != nullptr) {
          ++r->ops;
          r->bytes += (req_part_ + reply_part_) * sockets_.size();
          if (options_.record_latency) {
            r->latencies_us.push_back(
                std::chrono::duration<double, std::micro>(Clock::now() - send_times_.front())
                    .count());
          }
        }
        send_times_.pop_front();
        ++completed_;
      }
    }
    if (r != nullptr) r->end = Clock::now();
    // Drain what is still outstanding so the next phase starts clean.
    while (completed_ < sent_) {
      ReceiveSome();
      const uint64_t now_complete = *std::min_element(received_.begin(), received_.end());
      while (completed_ < now_complete) {
        send_times_.pop_front();
        ++completed_;
      }
    }
  }

  const EchoOptions options_;
  size_t req_part_ = 0;
  size_t reply_part_ = 0;
  std::vector<char> send_buf_;
  std::vector<std::vector<char>> recv_buf_;
  std::vector<zmq::socket_t> sockets_;
  std::vector<uint64_t> received_;
  std::deque<Clock::time_point> send_times_;
  uint64_t sent_ = 0;
  uint64_t completed_ = 0;
};

}  // namespace

Measurement RunEcho(const EchoOptions& options) {
  CHECK_GE(options.clients, 1);
  CHECK_GE(options.servers, 1);
  CHECK_GE(options.in_flight, 1);
  zmq::context_t ctx(2);
  std::vector<std::unique_ptr<EchoServer>> servers;
  std::vector<std::string> endpoints;
  const bool echo = options.request_bytes == options.reply_bytes;
  for (int i = 0; i < options.servers; ++i) {
    servers.push_back(
        std::make_unique<EchoServer>(&ctx, std::max<size_t>(options.reply_bytes / options.servers, 1), echo));
    endpoints.push_back(servers.back()->endpoint());
  }
  std::vector<std::unique_ptr<EchoClient>> clients;
  for (int i = 0; i < options.clients; ++i) {
    clients.push_back(std::make_unique<EchoClient>(&ctx, endpoints, options));
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<ClientResult> results(clients.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < clients.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = clients[i]->Run(&ready, &go, &stop); });
  }
  while (ready.load() < options.clients) std::this_thread::sleep_for(std::chrono::microseconds(100));
  const ProcessUsage usage = ProcessUsage::Now();
  const auto start = Clock::now();
  go = true;
  while (SecondsSince(start) < options.seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop = true;
  for (auto& t : threads) t.join();
  Measurement m;
  for (auto& r : results) {
    m.seconds = std::max(m.seconds, std::chrono::duration<double>(r.end - start).count());
    m.ops += r.ops;
    m.bytes += r.bytes;
    m.latencies_us.insert(m.latencies_us.end(), r.latencies_us.begin(), r.latencies_us.end());
  }
  m.items = m.ops;
  m.SetUsageSince(usage);
  clients.clear();
  servers.clear();
  return m;
}

}  // namespace bench
}  // namespace relaxps
