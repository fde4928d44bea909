// Tests of common/advertise: the endpoint registered for a bound socket.
#include "common/advertise.h"

#include <gtest/gtest.h>

namespace relaxps {
namespace {

TEST(AdvertiseTest, DefaultsToTheBoundEndpoint) {
  EXPECT_EQ(AdvertisedEndpoint("tcp://127.0.0.1:4000", "").value(), "tcp://127.0.0.1:4000");
  EXPECT_EQ(AdvertisedEndpoint("tcp://10.1.2.3:4000", "").value(), "tcp://10.1.2.3:4000");
  EXPECT_EQ(AdvertisedEndpoint("ipc:///tmp/x", "").value(), "ipc:///tmp/x");
}

TEST(AdvertiseTest, AWildcardBindNeedsAnAddress) {
  for (const char* bound : {"tcp://0.0.0.0:4000", "tcp://[::]:4000", "tcp://*:*"}) {
    StatusOr<std::string> a = AdvertisedEndpoint(bound, "");
    ASSERT_FALSE(a.ok()) << bound;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find("--advertise"), std::string::npos) << a.status();
  }
}

TEST(AdvertiseTest, HostTakesTheBoundPortAndFullFormsAreKept) {
  EXPECT_EQ(AdvertisedEndpoint("tcp://0.0.0.0:4000", "10.0.0.7").value(), "tcp://10.0.0.7:4000");
  EXPECT_EQ(AdvertisedEndpoint("tcp://0.0.0.0:4000", "node3").value(), "tcp://node3:4000");
  EXPECT_EQ(AdvertisedEndpoint("tcp://0.0.0.0:4000", "[fd00::7]").value(),
            "tcp://[fd00::7]:4000");
  EXPECT_EQ(AdvertisedEndpoint("tcp://0.0.0.0:4000", "node3:5000").value(),
            "tcp://node3:5000");
  EXPECT_EQ(AdvertisedEndpoint("tcp://0.0.0.0:4000", "[fd00::7]:5000").value(),
            "tcp://[fd00::7]:5000");
  EXPECT_EQ(AdvertisedEndpoint("tcp://0.0.0.0:4000", "tcp://gw:6000").value(), "tcp://gw:6000");
}

TEST(AdvertiseTest, RefusesMalformedAddresses) {
  EXPECT_FALSE(AdvertisedEndpoint("tcp://0.0.0.0:4000", "tcp://host").ok());
  EXPECT_FALSE(AdvertisedEndpoint("tcp://0.0.0.0:4000", "fd00::7").ok());
  EXPECT_FALSE(AdvertisedEndpoint("tcp://0.0.0.0:4000", "a b").ok());
  EXPECT_FALSE(AdvertisedEndpoint("ipc:///tmp/x", "host").ok());
}

// Host names are resolved up front: a name that does not resolve is an
// InvalidArgument naming it, at once.
TEST(AdvertiseTest, AnUnresolvableHostIsAClearErrorAtOnce) {
  const Status s = CheckHostResolves("tcp://no-such-host.invalid:5555");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cannot resolve host 'no-such-host.invalid'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("tcp://no-such-host.invalid:5555"), std::string::npos) << s;
  EXPECT_TRUE(CheckHostResolves("tcp://127.0.0.1:5555").ok());
  EXPECT_TRUE(CheckHostResolves("tcp://localhost:5555").ok());
  EXPECT_TRUE(CheckHostResolves("tcp://*:*").ok());
  EXPECT_TRUE(CheckHostResolves("tcp://[::1]:5555").ok());
  EXPECT_TRUE(CheckHostResolves("ipc:///tmp/x").ok());
}

// A source address must be a numeric address this host has: anything else
// is an InvalidArgument naming it, not connections retrying without a word.
TEST(AdvertiseTest, ASourceAddressIsANumericAddressOfThisHost) {
  EXPECT_TRUE(CheckSourceAddress("").ok());
  EXPECT_TRUE(CheckSourceAddress("127.0.0.1").ok());
  EXPECT_TRUE(CheckSourceAddress("127.0.0.3").ok());  // All of 127/8 is on lo.
  const Status name = CheckSourceAddress("localhost");
  EXPECT_EQ(name.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(name.message().find("'localhost' is not a numeric IPv4 or IPv6 address"),
            std::string::npos)
      << name;
  // 192.0.2.0/24 is TEST-NET-1, documentation only: no host has it.
  const Status foreign = CheckSourceAddress("192.0.2.7");
  EXPECT_EQ(foreign.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.message().find("192.0.2.7 is not an address of this host"), std::string::npos)
      << foreign;
}

}  // namespace
}  // namespace relaxps
