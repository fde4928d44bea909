// Fuzz target: what a server does with a data request once protobuf has
// parsed its header (PUSH, PULL, PUSH_PULL, PUSH_ROWS, PULL_ROWS): the
// range, slot and frame-count checks, row-id and payload decoding (sizes,
// encodings, alignment: common/payload_codec and server/internal/request_codec), and the dense
// shard's push/pull with the decoded values, in the order of
// ServerImpl::HandleDense / HandleSparse.
//
// Input: a mode byte. Even modes parse the header from a length-prefixed
// byte string, as the server does; odd modes take the header's fields
// straight from the input (protobuf's parser is not instrumented, so this
// reaches our checks faster). Then up to two length-prefixed payload frames,
// each placed 0-7 bytes past an aligned address.
//
// Findings: sanitizer reports, crashes, a decoder accepting a frame of the
// wrong size, a request that passes the checks but reads out of bounds.
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "common/wire.h"
#include "consistency/consistency_policy.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "server/internal/dense_shard.h"
#include "common/payload_codec.h"
#include "server/internal/request_codec.h"
#include "storage/param_store.h"
#include "tests/fuzz/fuzz_input.h"

namespace relaxps {
namespace {

constexpr uint64_t kShardBegin = 4096;
constexpr uint64_t kShardEnd = kShardBegin + 300;
constexpr uint32_t kRowWidth = 3;

// Constant across inputs: the device, a memory store with one dense shard
// (SGD: one slot) and the async policy (pulls answer at once).
struct Fixture {
  std::unique_ptr<kernels::Device> device;
  std::unique_ptr<ParamStore> store;
  std::unique_ptr<ConsistencyPolicy> policy;
  DenseShard* shard = nullptr;

  Fixture() {
    device = std::move(kernels::NewDevice(kernels::DeviceOptions())).value();
    ParamStoreOptions so;
    so.kind = "memory";
    store = std::move(NewParamStore(so)).value();
    policy = std::move(NewConsistencyPolicy(ConsistencyOptions())).value();
    DenseShardSpec spec;
    spec.table = "dense";
    spec.begin = kShardBegin;
    spec.end = kShardEnd;
    spec.num_slots = 1;
    shard = std::move(store->CreateDense(spec)).value();
  }
};

Fixture& GetFixture() {
  static Fixture* f = new Fixture();
  return *f;
}

// A frame of exactly `bytes` starting `misalign` bytes past a 16-byte
// boundary, in its own allocation, so ASan catches a read past its end.
Frame MisalignedFrame(const std::string& bytes, size_t misalign) {
  char* storage = new char[misalign + bytes.size() + 1];
  uint8_t* base = reinterpret_cast<uint8_t*>(storage + misalign);
  std::memcpy(base, bytes.data(), bytes.size());
  return Frame::Share(Buffer<uint8_t>::Wrap(base, bytes.size(), [storage] { delete[] storage; }));
}

wire::Header TakeHeader(fuzz::FuzzInput* in, bool parse) {
  wire::Header h;
  if (parse) {
    const std::string bytes = in->TakeString(255);
    if (!h.ParseFromString(bytes)) h.Clear();
    return h;
  }
  h.set_type(static_cast<wire::MsgType>(in->TakeInRange(wire::PUSH, wire::PULL_ROWS)));
  h.set_key_begin(in->Take<uint8_t>() < 200 ? kShardBegin + in->Take<uint16_t>() % 400
                                            : in->Take<uint64_t>());
  h.set_key_count(in->Take<uint8_t>() < 200 ? in->Take<uint16_t>() % 400 : in->Take<uint64_t>());
  h.set_slot(in->Take<int8_t>());
  const uint8_t clock_kind = in->Take<uint8_t>();
  h.set_clock(clock_kind < 200   ? in->Take<uint8_t>()
              : clock_kind < 220 ? std::numeric_limits<int64_t>::max() - in->Take<uint8_t>()
              : clock_kind < 240 ? std::numeric_limits<int64_t>::min() + in->Take<uint8_t>()
                                 : in->Take<int64_t>());
  h.set_sender(in->Take<uint8_t>() < 200 ? in->Take<uint8_t>() : in->Take<int32_t>());
  const uint8_t enc = in->Take<uint8_t>();
  h.set_encoding(static_cast<wire::Encoding>(enc < 250 ? enc % 2 : enc));
  return h;
}

void ReadAll(const float* v, uint64_t n) {
  volatile float sink = 0;
  for (uint64_t i = 0; i < n; ++i) sink = sink + v[i];
}

void Dense(const wire::Header& h, const std::vector<Frame>& frames, std::vector<float>* scratch) {
  Fixture& f = GetFixture();
  auto optimizer = std::move(kernels::NewOptimizer(OptimizerOptions())).value();
  server_internal::DenseShardState state(f.shard, std::move(optimizer), f.policy.get(),
                                         f.device.get(), f.store.get());
  const uint64_t n = h.key_count();
  if (!server_internal::CheckClock(h.clock()).ok()) return;
  if (!state.CheckRange(h.key_begin(), n).ok()) return;
  FUZZ_CHECK(n > 0 && h.key_begin() >= kShardBegin && h.key_begin() + n <= kShardEnd);
  const bool push = h.type() != wire::PULL;
  if (h.slot() != 0 && (h.type() != wire::PULL || h.slot() < 0 || h.slot() >= 1)) return;
  if (frames.size() != (push ? 1u : 0u)) return;
  if (push) {
    StatusOr<const float*> grads =
        DecodeFloats(frames[0], n, h.encoding(), scratch);
    if (!grads.ok()) return;
    FUZZ_CHECK(frames[0].size() == n * (h.encoding() == wire::ENC_FP16 ? 2 : 4));
    ReadAll(*grads, n);
    if (!f.device->AllFinite(*grads, n)) return;
    if (!state.Push(h.sender(), h.clock(), h.key_begin(), *grads, n).ok()) return;
    if (h.type() == wire::PUSH) return;
  }
  const int64_t pull_clock = h.type() == wire::PUSH_PULL ? h.clock() + 1 : h.clock();
  bool answered = false;
  state.Pull(pull_clock, h.key_begin(), n, /*deadline_ms=*/0,
             [&](const Status& s, FloatBuffer params, int64_t) {
               answered = true;
               if (!s.ok()) return;
               FUZZ_CHECK(params.size() == n);
               Frame reply = EncodeFloats(params, h.encoding());
               FUZZ_CHECK(reply.size() == n * (h.encoding() == wire::ENC_FP16 ? 2 : 4));
             });
  FUZZ_CHECK(answered);  // Async: never queued.
}

void Sparse(const wire::Header& h, const std::vector<Frame>& frames,
            std::vector<float>* scratch) {
  const bool push = h.type() == wire::PUSH_ROWS;
  if (h.slot() != 0 && (push || h.slot() < 0 || h.slot() >= 1)) return;
  if (frames.size() != (push ? 2u : 1u)) return;
  std::vector<uint64_t> id_scratch;
  StatusOr<const uint64_t*> ids =
      server_internal::DecodeRowIds(frames[0], h.key_count(), &id_scratch);
  if (!ids.ok()) return;
  const size_t n = h.key_count();
  FUZZ_CHECK(n > 0 && frames[0].size() == n * sizeof(uint64_t));
  volatile uint64_t sink = 0;
  for (size_t i = 0; i < n; ++i) sink = sink ^ (*ids)[i];
  if (!push) return;
  StatusOr<const float*> grads = DecodeFloats(frames[1], n * kRowWidth, h.encoding(), scratch);
  if (!grads.ok()) return;
  ReadAll(*grads, n * kRowWidth);
}

}  // namespace
}  // namespace relaxps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace relaxps;
  QuietProtobufLogs();
  fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.Take<uint8_t>();
  const wire::Header h = TakeHeader(&in, mode % 2 == 0);
  std::vector<Frame> frames;
  const size_t num_frames = in.TakeInRange(0, 3);
  for (size_t i = 0; i < num_frames; ++i) {
    const size_t misalign = in.TakeInRange(0, 7);
    frames.push_back(MisalignedFrame(i + 1 == num_frames ? in.TakeRest() : in.TakeString(4096),
                                     misalign));
  }
  std::vector<float> scratch;
  switch (h.type()) {
    case wire::PUSH:
    case wire::PULL:
    case wire::PUSH_PULL:
      Dense(h, frames, &scratch);
      break;
    case wire::PUSH_ROWS:
    case wire::PULL_ROWS:
      Sparse(h, frames, &scratch);
      break;
    default:
      break;
  }
  return 0;
}
