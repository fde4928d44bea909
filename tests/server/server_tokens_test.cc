// ServerTokens (server/internal/server_tokens.h): a server-to-server
// message is accepted only when it names its sender and carries that
// server's current token; a newer set revokes a restarted server's old
// token, an older one changes nothing, a malformed one is refused whole.
#include "server/internal/server_tokens.h"

#include <string>

#include <gtest/gtest.h>

#include "common/member_token.h"
#include "tests/test_util.h"

namespace relaxps {
namespace server_internal {
namespace {

wire::ServerTokens Set(uint64_t version, const std::vector<std::pair<int, std::string>>& tokens) {
  wire::ServerTokens st;
  st.set_map_version(version);
  for (const auto& [id, token] : tokens) {
    st.add_ids(id);
    st.add_tokens(token);
  }
  return st;
}

// A forwarded push claiming to come from server `from` (none if < 0) with `token`.
wire::Header Forward(int from, const std::string& token) {
  wire::Header h;
  h.set_type(wire::PUSH);
  h.set_forwarded(true);
  h.set_sender(3);  // The worker whose push it is.
  if (from >= 0) h.set_from_server(from);
  SetMemberToken(token, &h);
  return h;
}

TEST(ServerTokensTest, OnlyTheNamedServersCurrentTokenIsAccepted) {
  const std::string t0 = NewMemberToken(), t1 = NewMemberToken();
  ServerTokens tokens;
  ASSERT_OK(tokens.Update(Set(5, {{0, t0}, {1, t1}})));
  EXPECT_OK(tokens.Check(Forward(0, t0)));
  EXPECT_OK(tokens.Check(Forward(1, t1)));
  // Another server's token, no token, a stranger's, no sender named, a
  // server that is not live.
  for (const wire::Header& h :
       {Forward(1, t0), Forward(0, ""), Forward(0, std::string(kMemberTokenBytes, 'x')),
        Forward(-1, t0), Forward(2, t0)}) {
    Status s = tokens.Check(h);
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s;
  }
  EXPECT_NE(tokens.Check(Forward(-1, t0)).message().find("from_server"), std::string::npos);
  EXPECT_NE(tokens.Check(Forward(1, t0)).message().find("server 1"), std::string::npos);
}

TEST(ServerTokensTest, ARestartRevokesTheOldTokenAndAnOlderSetChangesNothing) {
  const std::string t0 = NewMemberToken(), old1 = NewMemberToken(), new1 = NewMemberToken();
  ServerTokens tokens;
  ASSERT_OK(tokens.Update(Set(5, {{0, t0}, {1, old1}})));
  // Server 1 restarted: its registration bumped the map version.
  ASSERT_OK(tokens.Update(Set(6, {{0, t0}, {1, new1}})));
  EXPECT_EQ(tokens.Check(Forward(1, old1)).code(), StatusCode::kPermissionDenied);
  EXPECT_OK(tokens.Check(Forward(1, new1)));
  // A heartbeat reply computed before the restart arrives late: ignored.
  ASSERT_OK(tokens.Update(Set(5, {{0, t0}, {1, old1}})));
  EXPECT_EQ(tokens.version(), 6u);
  EXPECT_EQ(tokens.Check(Forward(1, old1)).code(), StatusCode::kPermissionDenied);
  // Declared dead at the same version: in no set any more.
  ASSERT_OK(tokens.Update(Set(6, {{0, t0}})));
  EXPECT_EQ(tokens.Check(Forward(1, new1)).code(), StatusCode::kPermissionDenied);
  EXPECT_OK(tokens.Check(Forward(0, t0)));
}

TEST(ServerTokensTest, AMalformedSetIsRefusedWhole) {
  const std::string t0 = NewMemberToken();
  ServerTokens tokens;
  ASSERT_OK(tokens.Update(Set(2, {{0, t0}})));
  wire::ServerTokens uneven = Set(3, {{0, t0}});
  uneven.add_ids(1);
  EXPECT_EQ(tokens.Update(uneven).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tokens.Update(Set(3, {{0, t0}, {0, NewMemberToken()}})).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(tokens.Update(Set(3, {{-1, t0}})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tokens.Update(Set(3, {{1, "short"}})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tokens.version(), 2u);
  EXPECT_EQ(tokens.size(), 1u);
  EXPECT_OK(tokens.Check(Forward(0, t0)));
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
