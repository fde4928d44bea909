#include "common/curve_auth.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <glog/logging.h>
#include <zmq_addon.hpp>

namespace relaxps {

namespace fs = std::filesystem;

Status GenerateCurveKeys(const std::string& dir, const std::vector<std::string>& names) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IOError("cannot create " + dir + ": " + ec.message());
  for (const std::string& name : names) {
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
    p << pub << "\n";
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
    std::string pub;
    std::getline(f, pub);
    if (pub.size() != 40) return CorruptionError(e.path().string() + " is not a public key");
    keys[pub] = e.path().stem().string();
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
  if (role == "observer") return user_id == "observer" || user_id == "ctl";
  if (role == "coordinator" || role == "ctl") return user_id == role;
  if (role != "server" && role != "worker") return false;
  const std::string prefix = role + "-";
  if (user_id.compare(0, prefix.size(), prefix) != 0) return false;
  return id < 0 || user_id == prefix + std::to_string(id);
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
