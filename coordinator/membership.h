// Membership: who is in the job and who is alive.
//
// Tracks registered servers and workers, their last heartbeat and (workers)
// their clock, and declares a member dead when it has been silent for longer
// than the heartbeat timeout. Time is passed in (monotonic ms) so tests can
// drive it with a fake clock.
//
// Thread-safety: not synchronized; owned by the coordinator's loop.
#ifndef RELAXPS_COORDINATOR_MEMBERSHIP_H_
#define RELAXPS_COORDINATOR_MEMBERSHIP_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace relaxps {

struct MemberInfo {
  int id = -1;
  std::string endpoint;  // Servers only.
  int pid = 0;
  int64_t last_heartbeat_ms = 0;
  int64_t clock = 0;  // Workers only: completed clocks.
  // Workers only, as of the last heartbeat: its incarnation and the push
  // parts servers acknowledged to it.
  uint64_t incarnation = 0;
  uint64_t acked_updates = 0;
  bool alive = true;
  // Workers only: reported that it finished (HeartbeatRequest.finished) or
  // said goodbye (DEREGISTER). A dead worker without it went silent: lost.
  bool finished = false;
  // Workers only: the error it reported ending with (empty: none).
  std::string failure;
  // Workers only: a heartbeat of it arrived since it registered.
  bool heard = false;
  // Its newest registration's member token (common/member_token.h): its
  // messages are accepted only with it.
  std::string token;
};

class Membership {
 public:
  explicit Membership(int64_t heartbeat_timeout_ms) : timeout_ms_(heartbeat_timeout_ms) {}

  // Registers (or re-registers) a member; `requested_id` < 0 assigns the next
  // free id. Returns the id.
  int AddServer(int requested_id, const std::string& endpoint, int pid, int64_t now_ms);
  int AddWorker(int requested_id, int64_t start_clock, int pid, int64_t now_ms);
  void RemoveWorker(int id);
  // Sets the member token of a registered member (no-op for an unknown id).
  void SetServerToken(int id, const std::string& token);
  void SetWorkerToken(int id, const std::string& token);
  // Records that worker `id` finished (see MemberInfo::finished), with the
  // error it ends with (`failure`, empty: none). Returns true the first time
  // for a known worker.
  bool MarkWorkerFinished(int id, const std::string& failure = "");
  // Workers that are dead and never finished (went silent).
  int LostWorkers() const;
  // "worker <id>: <failure>" of each worker that reported ending with an
  // error, by id.
  std::vector<std::string> FailedWorkers() const;

  // Records a heartbeat; returns false for an unknown or dead member.
  bool ServerHeartbeat(int id, int64_t now_ms);
  bool WorkerHeartbeat(int id, int64_t clock, int64_t now_ms, uint64_t incarnation = 0,
                       uint64_t acked_updates = 0);

  // Marks a live server dead (a confirmed crash). Returns false if it was not
  // a live server.
  bool MarkServerDead(int id);

  // Erases the dead workers that never sent a heartbeat and never finished
  // (a registration and nothing else: a crash at start, or a forged REGISTER
  // in plain mode), after ExpireWorkers reported them; they are not counted
  // as lost. Returns how many.
  int DropNeverHeardWorkers();
  // Members listed, live or dead (--max_members).
  size_t size() const { return servers_.size() + workers_.size(); }

  // Marks members silent for too long as dead and returns their ids.
  std::vector<int> ExpireServers(int64_t now_ms);
  std::vector<int> ExpireWorkers(int64_t now_ms);

  // Counts every live member as heard from at `now_ms`: after the
  // coordinator itself stalled (paused, starved), their silence was its own
  // deafness, and a member that really died is found a timeout later.
  void ForgiveSilence(int64_t now_ms);

  const std::map<int, MemberInfo>& servers() const { return servers_; }
  const std::map<int, MemberInfo>& workers() const { return workers_; }
  int live_servers() const;
  // Ids and clocks of live workers (sorted by id).
  void LiveWorkers(std::vector<int>* ids, std::vector<int64_t>* clocks) const;
  // Minimum clock over live workers (0 if none).
  int64_t MinWorkerClock() const;
  // Bumped whenever the live worker set changes.
  uint64_t worker_set_version() const { return worker_set_version_; }
  // A restarted coordinator resumes the version servers have seen.
  void set_worker_set_version(uint64_t v) { worker_set_version_ = v; }

 private:
  static int NextId(const std::map<int, MemberInfo>& members, int requested);
  std::vector<int> Expire(std::map<int, MemberInfo>* members, int64_t now_ms);

  const int64_t timeout_ms_;
  std::map<int, MemberInfo> servers_;
  std::map<int, MemberInfo> workers_;
  uint64_t worker_set_version_ = 1;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_MEMBERSHIP_H_
