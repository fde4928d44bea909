#include "common/curve_auth.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <glog/logging.h>
#include <zmq_addon.hpp>

#include "common/member_token.h"

namespace relaxps {

namespace fs = std::filesystem;

namespace {

// The id in "worker-<id>" or "server-<id>" (-1 if `name` is not that).
int IdInName(const std::string& name, const std::string& role) {
  const std::string prefix = role + "-";
  if (name.compare(0, prefix.size(), prefix) != 0 || name.size() == prefix.size() ||
      name.size() > prefix.size() + 9) {
    return -1;
  }
  int id = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    id = id * 10 + (name[i] - '0');
  }
  return id;
}

}  // namespace

StatusOr<Role> DefaultRoleOf(const std::string& name) {
  if (name == "coordinator") return Role::kCoordinator;
  if (name == "ctl") return Role::kOperator;
  if (name == "observer") return Role::kObserver;
  if (IdInName(name, "server") >= 0) return Role::kServer;
  if (IdInName(name, "worker") >= 0) return Role::kWorker;
  return InvalidArgumentError("principal '" + name + "' has no role of its own: name it " +
                              "NAME:operator or NAME:observer");
}

Status CheckPrincipal(const std::string& name, const std::string& role) {
  ASSIGN_OR_RETURN(Role r, ParseRole(role));
  if (name.empty() || name.find_first_of("/:. ") != std::string::npos) {
    return InvalidArgumentError("principal name '" + name +
                                "' must be non-empty without '/', ':', '.' or spaces");
  }
  if ((r == Role::kWorker || r == Role::kServer) && IdInName(name, role) < 0) {
    return InvalidArgumentError("a " + role + " key must be named " + role + "-<id>, not '" +
                                name + "' (its id is bound to the key)");
  }
  if (r == Role::kCoordinator && name != "coordinator") {
    return InvalidArgumentError("the coordinator's key must be named 'coordinator'");
  }
  return Status::OK();
}

Principal PrincipalOf(const std::string& user_id) {
  Principal p;
  const size_t colon = user_id.find(':');
  if (colon == std::string::npos) return p;
  StatusOr<Role> role = ParseRole(user_id.substr(0, colon));
  if (!role.ok()) return p;
  p.known = true;
  p.role = *role;
  p.name = user_id.substr(colon + 1);
  if (p.role == Role::kWorker || p.role == Role::kServer) p.id = IdInName(p.name, RoleName(p.role));
  return p;
}

Status GenerateCurveKeys(const std::string& dir, const std::vector<std::string>& names) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IOError("cannot create " + dir + ": " + ec.message());
  for (const std::string& principal : names) {
    // "name" (its role follows from the name) or "name:role".
    const size_t colon = principal.find(':');
    const std::string name = principal.substr(0, colon);
    std::string role;
    if (colon != std::string::npos) {
      role = principal.substr(colon + 1);
    } else {
      ASSIGN_OR_RETURN(Role r, DefaultRoleOf(name));
      role = RoleName(r);
    }
    RETURN_IF_ERROR(CheckPrincipal(name, role));
    char pub[41], sec[41];
    if (zmq_curve_keypair(pub, sec) != 0) {
      return InternalError("zmq_curve_keypair failed (libzmq without CURVE?)");
    }
    const std::string key = dir + "/" + name + ".key";
    {
      std::ofstream f(key, std::ios::trunc);
      f << pub << "\n" << sec << "\n";
      if (!f) return IOError("cannot write " + key);
    }
    ::chmod(key.c_str(), 0600);
    std::ofstream p(dir + "/" + name + ".pub", std::ios::trunc);
    p << pub << "\nrole=" << role << "\n";
    if (!p) return IOError("cannot write " + dir + "/" + name + ".pub");
  }
  return Status::OK();
}

std::vector<std::string> JobPrincipals(int num_servers, int num_workers) {
  std::vector<std::string> names = {"coordinator", "ctl", "observer"};
  for (int i = 0; i < num_servers; ++i) names.push_back("server-" + std::to_string(i));
  for (int i = 0; i < num_workers; ++i) names.push_back("worker-" + std::to_string(i));
  return names;
}

StatusOr<CurveKeys> LoadCurveKeys(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name + ".key";
  std::ifstream f(path);
  if (!f) return NotFoundError("no key " + path + " (relaxps-ctl keygen writes it)");
  CurveKeys k;
  std::getline(f, k.public_key);
  std::getline(f, k.secret_key);
  if (k.public_key.size() != 40 || k.secret_key.size() != 40) {
    return CorruptionError(path + " is not a key pair written by relaxps-ctl keygen");
  }
  return k;
}

StatusOr<std::string> LoadPublicKey(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name + ".pub";
  std::ifstream f(path);
  if (!f) return NotFoundError("no public key " + path + " (relaxps-ctl keygen writes it)");
  std::string pub;
  std::getline(f, pub);
  if (pub.size() != 40) return CorruptionError(path + " is not a public key");
  return pub;
}

StatusOr<std::map<std::string, std::string>> LoadAdmittedKeys(const std::string& dir) {
  std::map<std::string, std::string> keys;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".pub") continue;
    std::ifstream f(e.path());
    std::string pub, role_line;
    std::getline(f, pub);
    if (pub.size() != 40) return CorruptionError(e.path().string() + " is not a public key");
    const std::string name = e.path().stem().string();
    std::string role;
    if (std::getline(f, role_line) && !role_line.empty()) {
      if (role_line.rfind("role=", 0) != 0) {
        return CorruptionError(e.path().string() + ": second line must be role=<role>, not '" +
                               role_line + "'");
      }
      role = role_line.substr(5);
    } else {  // A key written before roles: the role its name implies.
      StatusOr<Role> r = DefaultRoleOf(name);
      if (!r.ok()) return r.status().WithPrefix(e.path().string());
      role = RoleName(*r);
    }
    if (Status s = CheckPrincipal(name, role); !s.ok()) return s.WithPrefix(e.path().string());
    keys[pub] = role + ":" + name;
  }
  if (ec) return NotFoundError("cannot read keys directory " + dir + ": " + ec.message());
  if (keys.empty()) return NotFoundError("no public keys (*.pub) in " + dir);
  return keys;
}

StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Start(
    zmq::context_t* context, std::map<std::string, std::string> admitted) {
  std::unique_ptr<ZapHandler> z(new ZapHandler());
  z->admitted_ = std::move(admitted);
  try {
    z->socket_ = zmq::socket_t(*context, zmq::socket_type::rep);
    z->socket_.set(zmq::sockopt::linger, 0);
    z->socket_.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    return InternalError(std::string("cannot start the ZAP handler: ") + e.what());
  }
  ZapHandler* raw = z.get();
  z->thread_ = std::thread([raw] { raw->Loop(); });
  return z;
}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ZapHandler::Loop() {
  std::vector<zmq::message_t> parts;
  while (!stop_.load()) {
    zmq::pollitem_t item{static_cast<void*>(socket_), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      parts.clear();
      if (!zmq::recv_multipart(socket_, std::back_inserter(parts))) continue;
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      continue;
    }
    // ZAP request: version, request id, domain, address, identity,
    // mechanism, credentials (the client's 32-byte public key for CURVE).
    std::string user, code = "400", text = "unknown key";
    if (parts.size() >= 7 && parts[5].to_string() == "CURVE" && parts[6].size() == 32) {
      char z85[41];
      zmq_z85_encode(z85, static_cast<const uint8_t*>(parts[6].data()), 32);
      auto it = admitted_.find(z85);
      if (it != admitted_.end()) {
        user = it->second;
        code = "200";
        text = "OK";
      }
    }
    if (code != "200") {
      refused_.fetch_add(1);
      uint64_t more = 0;
      if (log_limiter_.Allow("refused", &more)) {
        LOG(WARNING) << "refused a CURVE connection from "
                     << (parts.size() > 3 ? parts[3].to_string() : "?")
                     << ": key not among the job's (" << more << " more since the last line)";
      }
    }
    const std::string version = parts.empty() ? "1.0" : parts[0].to_string();
    const std::string request_id = parts.size() > 1 ? parts[1].to_string() : "";
    try {
      for (const std::string& f : {version, request_id, code, text, user}) {
        socket_.send(zmq::buffer(f), zmq::send_flags::sndmore);
      }
      socket_.send(zmq::buffer(std::string()), zmq::send_flags::none);  // Metadata.
    } catch (const zmq::error_t&) {
    }
  }
}

bool RoleAllows(const std::string& user_id, const std::string& role, int id) {
  if (user_id.empty()) return true;  // Plain TCP: nothing to check against.
  const Principal p = PrincipalOf(user_id);
  if (!p.known) return false;
  if (role == "observer") return p.role == Role::kObserver || p.role == Role::kOperator;
  if (role == "operator" || role == "ctl") return p.role == Role::kOperator;
  if (role == "coordinator") return p.role == Role::kCoordinator;
  if (role == "server") return p.role == Role::kServer && (id < 0 || p.id == id);
  if (role == "worker") return p.role == Role::kWorker && (id < 0 || p.id == id);
  return false;
}

Status CheckBindIsSafe(const std::string& bind, bool curve, bool insecure_bind_public) {
  if (curve || insecure_bind_public) return Status::OK();
  const bool loopback = bind.rfind("tcp://127.", 0) == 0 || bind.rfind("tcp://localhost:", 0) == 0 ||
                        bind.rfind("tcp://[::1]:", 0) == 0 || bind.rfind("ipc://", 0) == 0 ||
                        bind.rfind("inproc://", 0) == 0;
  if (loopback) return Status::OK();
  return InvalidArgumentError("--bind=" + bind +
                              " is reachable from other machines: use --security=curve (see "
                              "README, Security), or pass --insecure_bind_public to accept that "
                              "anyone who can reach it can read and change the model");
}

}  // namespace relaxps
