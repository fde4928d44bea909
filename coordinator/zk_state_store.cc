// The ZooKeeper coordinator state store (coordinator/state_store.h).
//
// PATH/epoch holds the term as text; its znode version is the fencing token:
// Claim() bumps it with a versioned set (so two claimers cannot both win),
// and every Write() is one zoo_multi whose first op checks that version. A
// deposed leader's write therefore fails as a whole (ZBADVERSION) even if its
// session is still alive. Records are znodes PATH/state/NAME.
#include <zookeeper/zookeeper.h>

#include <set>
#include <vector>

#include "coordinator/state_store.h"
#include "coordinator/zk_session.h"

namespace relaxps {
namespace {

// ZooKeeper's default jute.maxbuffer is 1 MiB per znode (and per request).
constexpr size_t kMaxRecordBytes = (size_t{1} << 20) - 4096;

class ZkStateStore final : public CoordinatorStateStore {
 public:
  ZkStateStore(ZkSession* session, std::string path)
      : session_(session), path_(std::move(path)), epoch_(path_ + "/epoch"),
        state_(path_ + "/state") {}

  Status Init() {
    RETURN_IF_ERROR(session_->EnsurePath(state_));
    const int rc = zoo_create(zh(), epoch_.c_str(), "0", 1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
    if (rc != ZOK && rc != ZNODEEXISTS) return ZkStatus(rc, "creating " + epoch_);
    return Status::OK();
  }

  std::string Name() const override { return "zk:" + path_; }

  StatusOr<ClaimedState> Claim() override {
    ClaimedState c;
    while (true) {
      char buf[64];
      int len = sizeof(buf) - 1;
      Stat stat;
      int rc = zoo_get(zh(), epoch_.c_str(), 0, buf, &len, &stat);
      RETURN_IF_ERROR(ZkStatus(rc, "reading " + epoch_));
      buf[std::max(0, len)] = '\0';
      const uint64_t term = std::strtoull(buf, nullptr, 10);
      c.term = term + 1;
      const std::string next = std::to_string(c.term);
      Stat after;
      rc = zoo_set2(zh(), epoch_.c_str(), next.data(), static_cast<int>(next.size()),
                    stat.version, &after);
      if (rc == ZBADVERSION) continue;  // Another claimer came first: read again.
      RETURN_IF_ERROR(ZkStatus(rc, "claiming " + epoch_));
      version_ = after.version;
      break;
    }
    // Read after the claim: a deposed leader's later writes fail their check.
    String_vector children{0, nullptr};
    int rc = zoo_get_children(zh(), state_.c_str(), 0, &children);
    RETURN_IF_ERROR(ZkStatus(rc, "listing " + state_));
    std::vector<std::string> names;
    for (int i = 0; i < children.count; ++i) names.emplace_back(children.data[i]);
    deallocate_String_vector(&children);
    std::vector<char> buf(kMaxRecordBytes + 4096);
    known_.clear();
    for (const std::string& name : names) {
      int len = static_cast<int>(buf.size());
      rc = zoo_get(zh(), (state_ + "/" + name).c_str(), 0, buf.data(), &len, nullptr);
      RETURN_IF_ERROR(ZkStatus(rc, "reading " + state_ + "/" + name));
      c.records[name].assign(buf.data(), std::max(0, len));
      known_.insert(name);
    }
    claimed_ = true;
    return c;
  }

  Status Write(const StateRecords& records) override {
    if (!claimed_) return FailedPreconditionError("Write() before Claim()");
    if (records.empty()) return Status::OK();
    std::vector<zoo_op_t> ops(records.size() + 1);
    std::vector<zoo_op_result_t> results(ops.size());
    std::vector<std::string> paths;
    paths.reserve(records.size());
    zoo_check_op_init(&ops[0], epoch_.c_str(), version_);
    size_t i = 1;
    for (const auto& [name, value] : records) {
      if (value.size() > kMaxRecordBytes) {
        return InvalidArgumentError("coordinator state record '" + name + "' is " +
                                    std::to_string(value.size()) +
                                    " bytes, more than a znode holds (1 MiB)");
      }
      paths.push_back(state_ + "/" + name);
      if (known_.count(name)) {
        zoo_set_op_init(&ops[i], paths.back().c_str(), value.data(),
                        static_cast<int>(value.size()), -1, nullptr);
      } else {
        zoo_create_op_init(&ops[i], paths.back().c_str(), value.data(),
                           static_cast<int>(value.size()), &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
      }
      ++i;
    }
    const int rc = zoo_multi(zh(), static_cast<int>(ops.size()), ops.data(), results.data());
    if (rc != ZOK) {
      if (results[0].err == ZBADVERSION || results[0].err == ZNONODE) {
        return AbortedError("another coordinator claimed " + epoch_ +
                            " (this one is deposed): the write of the coordinator state failed");
      }
      return ZkStatus(rc, "writing the coordinator state under " + state_);
    }
    for (const auto& [name, value] : records) known_.insert(name);
    return Status::OK();
  }

 private:
  zhandle_t* zh() const { return session_->handle(); }

  // Constant after construction.
  ZkSession* const session_;
  const std::string path_;
  const std::string epoch_;
  const std::string state_;

  bool claimed_ = false;
  int version_ = -1;            // PATH/epoch's version as of Claim().
  std::set<std::string> known_;  // Records that exist as znodes.
};

}  // namespace

StatusOr<std::unique_ptr<CoordinatorStateStore>> NewZkStateStore(ZkSession* session,
                                                                 const std::string& path) {
  auto store = std::make_unique<ZkStateStore>(session, path);
  RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<CoordinatorStateStore>(std::move(store));
}

}  // namespace relaxps
