#include "common/socket_poller.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

namespace relaxps {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A DEALER connected to a ROUTER over inproc, in one context.
class SocketPollerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    router_.bind("inproc://socket-poller-test");
    dealer_.connect("inproc://socket-poller-test");
  }

  // The ROUTER answers the DEALER's one pending message with `text`.
  void Answer(const std::string& text) {
    zmq::message_t identity, body;
    ASSERT_TRUE(router_.recv(identity));
    ASSERT_TRUE(router_.recv(body));
    router_.send(identity, zmq::send_flags::sndmore);
    router_.send(zmq::buffer(text));
  }

  zmq::context_t context_{1};
  zmq::socket_t router_{context_, zmq::socket_type::router};
  zmq::socket_t dealer_{context_, zmq::socket_type::dealer};
};

TEST_F(SocketPollerTest, TimesOutWithoutInput) {
  SocketPoller poller;
  const size_t dealer = poller.AddSocket(&dealer_);
  const auto start = SteadyClock::now();
  EXPECT_FALSE(poller.Wait(50));
  EXPECT_FALSE(poller.readable(dealer));
  EXPECT_GE(SteadyClock::now() - start, std::chrono::milliseconds(40));
}

TEST_F(SocketPollerTest, ReportsTheSocketWithInputAndOnlyIt) {
  SocketPoller poller;
  const size_t dealer = poller.AddSocket(&dealer_);
  const size_t router = poller.AddSocket(&router_);
  dealer_.send(zmq::str_buffer("ping"));
  poller.Touch(dealer);  // Sent on.
  ASSERT_TRUE(poller.Wait(5000));
  EXPECT_TRUE(poller.readable(router));
  EXPECT_FALSE(poller.readable(dealer));
  Answer("pong");
  poller.Touch(router);  // Sent on.
  ASSERT_TRUE(poller.Wait(5000));
  EXPECT_TRUE(poller.readable(dealer));
  zmq::message_t reply;
  ASSERT_TRUE(dealer_.recv(reply, zmq::recv_flags::dontwait));
  EXPECT_EQ(reply.to_string(), "pong");
  // Read until EAGAIN: nothing left, and no touch needed to wait again.
  EXPECT_FALSE(dealer_.recv(reply, zmq::recv_flags::dontwait));
  EXPECT_FALSE(poller.Wait(20));
}

TEST_F(SocketPollerTest, PlainDescriptor) {
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  SocketPoller poller;
  poller.AddSocket(&dealer_);
  const size_t wake = poller.AddFd(fd);
  EXPECT_FALSE(poller.Wait(0));
  const uint64_t one = 1;
  ASSERT_EQ(write(fd, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  ASSERT_TRUE(poller.Wait(5000));
  EXPECT_TRUE(poller.readable(wake));
  close(fd);
}

// The case Touch() exists for: a reply reaches the DEALER, then a send on it
// takes in the command that announced the reply, so the socket's descriptor
// stays quiet while the reply waits. A touched socket is asked anyway.
TEST_F(SocketPollerTest, TouchedSocketWithInputEndsTheWaitAtOnce) {
  SocketPoller poller;
  const size_t dealer = poller.AddSocket(&dealer_);
  EXPECT_FALSE(poller.Wait(0));  // Asks the new socket: not touched any more.
  dealer_.send(zmq::str_buffer("first"));
  Answer("reply");
  // libzmq's send processes pending commands at most about once a
  // millisecond; sleeping first makes this one do so.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  dealer_.send(zmq::str_buffer("second"));
  poller.Touch(dealer);
  const auto start = SteadyClock::now();
  ASSERT_TRUE(poller.Wait(2000));
  EXPECT_TRUE(poller.readable(dealer));
  EXPECT_LT(SteadyClock::now() - start, std::chrono::milliseconds(1000));
  zmq::message_t reply;
  ASSERT_TRUE(dealer_.recv(reply, zmq::recv_flags::dontwait));
  EXPECT_EQ(reply.to_string(), "reply");
}

}  // namespace
}  // namespace relaxps
