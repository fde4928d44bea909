// EchoServer: an RpcServer on a thread that answers every request OK with
// copies of its frames and counts what it received. For the transport and
// LoopClient tests.
//
// Thread-safety: endpoint() and received() from any thread.
#ifndef RELAXPS_TESTS_COMMON_ECHO_SERVER_H_
#define RELAXPS_TESTS_COMMON_ECHO_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "common/rpc_server.h"

namespace relaxps {
namespace test {

class EchoServer {
 public:
  EchoServer() {
    auto s = RpcServer::Bind(RpcServerOptions());
    CHECK(s.ok()) << s.status();
    server_ = std::move(s).value();
    thread_ = std::thread([this] {
      server_->Run([this](Request req) {
        received_.fetch_add(1);
        Message reply = MakeReply(req.msg.header, Status::OK());
        for (const Frame& f : req.msg.frames) reply.frames.push_back(Frame::Copy(f.data(), f.size()));
        server_->Reply(req, std::move(reply)).IgnoreError();
      });
    });
  }
  ~EchoServer() {
    server_->Stop();
    thread_.join();
  }
  const std::string& endpoint() const { return server_->endpoint(); }
  int received() const { return received_.load(); }

 private:
  std::unique_ptr<RpcServer> server_;
  std::atomic<int> received_{0};
  std::thread thread_;
};

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_COMMON_ECHO_SERVER_H_
