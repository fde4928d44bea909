// relaxps-bench-client: the data path as a trainer sees it. It links only the
// public client library (librelaxps_client.so, headers from include/relaxps)
// and libzmq, and runs as one process of a multi-process benchmark driven by
// bench/client_bench.py, which starts relaxps-coordinator and relaxps-server
// processes, these processes and the same measurements through the Python
// module (bench/client_bench_py.py).
//
// Roles (--role):
//   worker       a relaxps::Client connected to --coordinator;
//   echo_server  a bare ZeroMQ ROUTER on tcp://127.0.0.1:* (endpoint written
//                to --endpoint_file) that sends every message back as it came
//                (zero-copy), the yardstick of the relaxps server;
//   echo_client  DEALERs to the --echo endpoints: one operation sends
//                `bytes` split evenly over them and waits for every reply
//                (the same bytes each way as a dense request over S shards).
// A worker or echo client reads commands from stdin, one a line:
//   run OP BYTES SECONDS      OP: push_then_pull | pushpull | pushpull_lat
// and answers each with one JSON line on stdout:
//   {"op":..,"bytes":..,"ops":..,"seconds":..,"gbps":..,"p50_us":..,
//    "cpu_s":..,"minflt":..,"moved_bytes":..}
// where gbps counts bytes pushed + pulled (the echo: sent + received),
// cpu_s and minflt are this process's user+system CPU and minor page faults
// over the timed window (getrusage), after two untimed warm-up operations
// (which moved warmup_moved_bytes).
// "quit" (or end of input) leaves.
#include <sys/resource.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "relaxps/client.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string role;
  std::string coordinator;
  std::string endpoint_file;
  std::vector<std::string> echo;
  std::string table_prefix = "bench";
  // ClientOptions::io_threads etc. are left at their defaults: the point is
  // what a trainer gets without tuning.
};

[[noreturn]] void Usage(const std::string& why, int code = 2) {
  std::fprintf(code == 0 ? stdout : stderr,
               "relaxps-bench-client: %s\n"
               "usage: relaxps-bench-client --role=worker --coordinator=EP\n"
               "       relaxps-bench-client --role=echo_server --endpoint_file=F\n"
               "       relaxps-bench-client --role=echo_client --echo=EP[,EP...]\n"
               "then commands on stdin: run push_then_pull|pushpull|pushpull_lat BYTES SECONDS\n",
               why.c_str());
  std::exit(code);
}

std::vector<std::string> SplitCsv(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") Usage("the data path through the public client API", 0);
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) != 0 || eq == std::string::npos) Usage("bad argument '" + a + "'");
    const std::string key = a.substr(2, eq - 2), value = a.substr(eq + 1);
    if (key == "role") {
      f.role = value;
    } else if (key == "coordinator") {
      f.coordinator = value;
    } else if (key == "endpoint_file") {
      f.endpoint_file = value;
    } else if (key == "echo") {
      f.echo = SplitCsv(value);
    } else if (key == "table_prefix") {
      f.table_prefix = value;
    } else {
      Usage("unknown flag --" + key);
    }
  }
  if (f.role == "worker" && f.coordinator.empty()) Usage("--role=worker needs --coordinator");
  if (f.role == "echo_server" && f.endpoint_file.empty()) Usage("echo_server needs --endpoint_file");
  if (f.role == "echo_client" && f.echo.empty()) Usage("echo_client needs --echo");
  if (f.role != "worker" && f.role != "echo_server" && f.role != "echo_client") {
    Usage("unknown --role '" + f.role + "'");
  }
  return f;
}

struct Usage_ {
  double cpu_s = 0;
  long minflt = 0;
};

Usage_ SelfUsage() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  Usage_ u;
  u.cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
            ru.ru_stime.tv_usec * 1e-6;
  u.minflt = ru.ru_minflt;
  return u;
}

// One operation of a figure; returns false (after printing why) on failure.
using OpFn = std::function<bool()>;

// Runs `op` twice untimed, then for `seconds` (at least 3 times), and prints
// the figure's JSON line. `moved` is the payload bytes one operation moves
// (sent + received).
void Measure(const std::string& name, size_t bytes, double seconds, size_t moved,
             const OpFn& op) {
  for (int i = 0; i < 2; ++i) {
    if (!op()) {
      std::printf("{\"op\":\"%s\",\"bytes\":%zu,\"error\":\"operation failed\"}\n", name.c_str(),
                  bytes);
      std::fflush(stdout);
      return;
    }
  }
  std::vector<double> lat_us;
  const Usage_ u0 = SelfUsage();
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point end = t0 + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(seconds));
  uint64_t ops = 0;
  bool ok = true;
  for (;;) {
    const Clock::time_point s = Clock::now();
    if (ops >= 3 && s >= end) break;
    if (!op()) {
      ok = false;
      break;
    }
    lat_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
    ++ops;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  const Usage_ u1 = SelfUsage();
  if (!ok) {
    std::printf("{\"op\":\"%s\",\"bytes\":%zu,\"error\":\"operation failed\"}\n", name.c_str(),
                bytes);
    std::fflush(stdout);
    return;
  }
  std::sort(lat_us.begin(), lat_us.end());
  const double p50 = lat_us[lat_us.size() / 2];
  std::printf(
      "{\"op\":\"%s\",\"bytes\":%zu,\"ops\":%llu,\"seconds\":%.6f,\"gbps\":%.6f,\"p50_us\":%.3f,"
      "\"cpu_s\":%.6f,\"minflt\":%ld,\"moved_bytes\":%.0f,\"warmup_moved_bytes\":%.0f}\n",
      name.c_str(), bytes, static_cast<unsigned long long>(ops), elapsed,
      static_cast<double>(moved) * ops / elapsed / 1e9, p50, u1.cpu_s - u0.cpu_s,
      u1.minflt - u0.minflt, static_cast<double>(moved) * ops, 2.0 * static_cast<double>(moved));
  std::fflush(stdout);
}

// Reads "run OP BYTES SECONDS" lines and calls `run` for each.
int CommandLoop(const std::function<void(const std::string&, size_t, double)>& run) {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd, op;
    size_t bytes = 0;
    double seconds = 0;
    in >> cmd;
    if (cmd == "quit") break;
    if (cmd != "run" || !(in >> op >> bytes >> seconds) || bytes < sizeof(float) ||
        seconds <= 0) {
      std::printf("{\"error\":\"bad command '%s'\"}\n", line.c_str());
      std::fflush(stdout);
      continue;
    }
    run(op, bytes, seconds);
  }
  return 0;
}

// ---- relaxps worker -------------------------------------------------------

int RunWorker(const Flags& f) {
  relaxps::ClientOptions options;
  options.coordinator = f.coordinator;
  relaxps::StatusOr<std::unique_ptr<relaxps::Client>> connected =
      relaxps::Client::Connect(options);
  if (!connected.ok()) {
    std::fprintf(stderr, "relaxps-bench-client: connect: %s\n",
                 connected.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<relaxps::Client> client = std::move(*connected);
  return CommandLoop([&](const std::string& op, size_t bytes, double seconds) {
    const size_t n = bytes / sizeof(float);
    const std::string table = f.table_prefix + "_" + std::to_string(bytes);
    relaxps::TableOptions t;
    t.name = table;
    t.size = n;
    t.optimizer.lr = 1e-6f;
    relaxps::Status created = client->CreateTable(t);
    if (!created.ok()) {
      std::printf("{\"op\":\"%s\",\"bytes\":%zu,\"error\":\"create table: %s\"}\n", op.c_str(),
                  bytes, created.ToString().c_str());
      std::fflush(stdout);
      return;
    }
    // The caller's buffers, allocated once as a trainer's parameters and
    // gradients are.
    relaxps::FloatBuffer grads(n), out(n);
    for (size_t i = 0; i < n; ++i) grads[i] = 1e-3f;
    // Each call waits as a trainer's blocking step should: lending its
    // thread to the client (Client::Drive), so the reply is read here;
    // where it cannot drive, on the future.
    auto check = [&](std::future<relaxps::Status> f) {
      client->Drive(
          [&f] { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; },
          60 * 1000);
      const relaxps::Status s = f.get();
      if (!s.ok()) std::fprintf(stderr, "relaxps-bench-client: %s\n", s.ToString().c_str());
      return s.ok();
    };
    OpFn fn;
    if (op == "push_then_pull") {
      fn = [&] {
        return check(client->Push(table, 0, grads)) && check(client->Pull(table, 0, out));
      };
    } else if (op == "pushpull" || op == "pushpull_lat") {
      fn = [&] { return check(client->PushPull(table, 0, grads, out)); };
    } else {
      std::printf("{\"op\":\"%s\",\"error\":\"unknown op\"}\n", op.c_str());
      std::fflush(stdout);
      return;
    }
    Measure(op, bytes, seconds, 2 * bytes, fn);
  });
}

// ---- bare ZeroMQ echo -----------------------------------------------------

int RunEchoServer(const Flags& f) {
  void* ctx = zmq_ctx_new();
  void* router = zmq_socket(ctx, ZMQ_ROUTER);
  int unlimited = -1;
  zmq_setsockopt(router, ZMQ_SNDHWM, &unlimited, sizeof(unlimited));
  zmq_setsockopt(router, ZMQ_RCVHWM, &unlimited, sizeof(unlimited));
  if (zmq_bind(router, "tcp://127.0.0.1:*") != 0) {
    std::fprintf(stderr, "echo_server: bind: %s\n", zmq_strerror(zmq_errno()));
    return 1;
  }
  char endpoint[256];
  size_t len = sizeof(endpoint);
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &len);
  const std::string tmp = f.endpoint_file + ".tmp";
  FILE* out = std::fopen(tmp.c_str(), "w");
  if (out == nullptr) return 1;
  std::fprintf(out, "%s\n", endpoint);
  std::fclose(out);
  std::rename(tmp.c_str(), f.endpoint_file.c_str());
  // Each message (identity + payload frames) goes back as it came: the
  // received zmq_msg_t moves into the send without a copy.
  for (;;) {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, router, 0) < 0) {
      zmq_msg_close(&part);
      if (zmq_errno() == EINTR) continue;
      break;
    }
    const bool more = zmq_msg_more(&part);
    zmq_msg_send(&part, router, more ? ZMQ_SNDMORE : 0);
    zmq_msg_close(&part);
  }
  zmq_close(router);
  zmq_ctx_term(ctx);
  return 0;
}

int RunEchoClient(const Flags& f) {
  void* ctx = zmq_ctx_new();
  std::vector<void*> dealers;
  for (const std::string& ep : f.echo) {
    void* d = zmq_socket(ctx, ZMQ_DEALER);
    int unlimited = -1;
    zmq_setsockopt(d, ZMQ_SNDHWM, &unlimited, sizeof(unlimited));
    zmq_setsockopt(d, ZMQ_RCVHWM, &unlimited, sizeof(unlimited));
    if (zmq_connect(d, ep.c_str()) != 0) {
      std::fprintf(stderr, "echo_client: connect %s: %s\n", ep.c_str(), zmq_strerror(zmq_errno()));
      return 1;
    }
    dealers.push_back(d);
  }
  const int rc = CommandLoop([&](const std::string& op, size_t bytes, double seconds) {
    // The client's payload, sent zero-copy (its memory handed to ZeroMQ
    // with a no-op free, as relaxps hands over its buffers); replies are
    // read in place and dropped.
    const size_t per = bytes / dealers.size();
    std::vector<char> payload(per * dealers.size(), 1);
    Measure(op, bytes, seconds, 2 * per * dealers.size(), [&] {
      for (size_t i = 0; i < dealers.size(); ++i) {
        zmq_msg_t m;
        zmq_msg_init_data(&m, payload.data() + i * per, per, nullptr, nullptr);
        if (zmq_msg_send(&m, dealers[i], 0) < 0) return false;
      }
      std::vector<zmq_pollitem_t> items;
      for (void* d : dealers) items.push_back({d, 0, ZMQ_POLLIN, 0});
      size_t left = dealers.size();
      std::vector<bool> got(dealers.size(), false);
      while (left > 0) {
        if (zmq_poll(items.data(), static_cast<int>(items.size()), 10000) <= 0) return false;
        for (size_t i = 0; i < items.size(); ++i) {
          if (got[i] || !(items[i].revents & ZMQ_POLLIN)) continue;
          zmq_msg_t r;
          zmq_msg_init(&r);
          const int n = zmq_msg_recv(&r, dealers[i], 0);
          zmq_msg_close(&r);
          if (n < 0) return false;
          got[i] = true;
          --left;
        }
      }
      return true;
    });
  });
  for (void* d : dealers) {
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_close(d);
  }
  zmq_ctx_term(ctx);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  if (f.role == "worker") return RunWorker(f);
  if (f.role == "echo_server") return RunEchoServer(f);
  return RunEchoClient(f);
}
