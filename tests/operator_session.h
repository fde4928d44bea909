// OperatorSession: the member token of a new operator session at a
// coordinator, what relaxps-ctl opens for `checkpoint` and `shutdown`.
// TRIGGER_CHECKPOINT and SHUTDOWN are refused without one (docs/security.md).
#ifndef RELAXPS_TESTS_OPERATOR_SESSION_H_
#define RELAXPS_TESTS_OPERATOR_SESSION_H_

#include <string>

#include <glog/logging.h>

#include "common/member_token.h"
#include "common/rpc_client.h"
#include "common/wire.h"

namespace relaxps {
namespace test {

inline std::string OperatorSession(RpcClient* rpc, int coordinator) {
  Message reg;
  reg.header.set_type(wire::REGISTER);
  reg.header.mutable_register_request()->set_role("operator");
  reg.header.mutable_register_request()->set_protocol_version(kProtocolVersion);
  StatusOr<Message> reply = rpc->CallSync(coordinator, std::move(reg), 5000);
  CHECK(reply.ok()) << reply.status();
  return reply->header.register_reply().member_token();
}

// A TRIGGER_CHECKPOINT to `coordinator` from a new operator session; its reply.
inline StatusOr<Message> TriggerCheckpointAsOperator(const std::string& coordinator,
                                                     int timeout_ms) {
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator);
  Message m;
  m.header.set_type(wire::TRIGGER_CHECKPOINT);
  SetMemberToken(OperatorSession(&rpc, peer), &m.header);
  return rpc.CallSync(peer, std::move(m), timeout_ms);
}

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_OPERATOR_SESSION_H_
