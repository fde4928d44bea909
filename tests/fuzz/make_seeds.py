#!/usr/bin/python3
"""Writes the hand-made seed inputs of the fuzz targets into tests/fuzz/<target>/.

Each seed is a small valid input in the layout its target's comment describes
(a mode byte, then fields or a serialized record), so fuzzing starts from the
accepted paths. scripts/fuzz.sh adds the inputs the fuzzer finds interesting
next to these (named by their SHA-1). Run from anywhere: make_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_int(field, v):
    return varint(field << 3) + varint(v)


def pb_bytes(field, data):
    return varint(field << 3 | 2) + varint(len(data)) + data


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- request_codec: mode, header fields (odd mode) or bytes (even), frames.
PUSH, PULL, PUSH_PULL, PUSH_ROWS, PULL_ROWS = 10, 11, 12, 13, 14


def fields(msg_type, begin_off, count, slot=0, clock=3, sender=1, enc=0):
    return (bytes([1, msg_type - 10, 0]) + struct.pack("<H", begin_off) + bytes([0]) +
            struct.pack("<H", count) + struct.pack("<b", slot) + bytes([0, clock, 0, sender, enc]))


def frames(*payloads):
    out = bytes([len(payloads)])
    for i, p in enumerate(payloads):
        out += bytes([i])  # misalignment
        if i + 1 < len(payloads):
            out += struct.pack("<Q", len(p))
        out += p
    return out


def floats(n):
    return struct.pack("<%df" % n, *[0.25 * i for i in range(n)])


def ids(*v):
    return struct.pack("<%dQ" % len(v), *v)


write("request_codec", "push-fp32", fields(PUSH, 10, 4) + frames(floats(4)))
write("request_codec", "pull", fields(PULL, 0, 8) + frames())
write("request_codec", "pull-slot", fields(PULL, 0, 8, slot=1) + frames())
write("request_codec", "push-pull-fp16", fields(PUSH_PULL, 296, 4, enc=1) +
      frames(struct.pack("<4H", 0x3C00, 0x4000, 0xBC00, 0)))
write("request_codec", "push-nan", fields(PUSH, 0, 1) + frames(struct.pack("<f", float("nan"))))
write("request_codec", "push-rows", fields(PUSH_ROWS, 0, 2) + frames(ids(7, 1 << 63), floats(6)))
write("request_codec", "pull-rows", fields(PULL_ROWS, 0, 3) + frames(ids(1, 2, 1)))
header = (pb_int(1, PUSH) + pb_int(5, 2) + pb_bytes(6, b"dense") + pb_int(7, 4096) +
          pb_int(8, 2) + pb_int(9, 5))
write("request_codec", "proto-push", bytes([0]) + bytes([len(header)]) + header +
      frames(floats(2)))

# ---- shard_map: mode, map fields (odd) or a serialized ShardMap (even), routing.
dense = (bytes([1, 3, 2, 1]) + bytes([1, ord("d"), 0, 0, 2, 0]) +
         bytes([0]) + struct.pack("<H", 100) + bytes([1]) +
         bytes([0]) + struct.pack("<H", 50) + bytes([2]) + bytes([0]))
write("shard_map", "dense-two-ranges", dense + bytes([0, 10, 0, 60]) + b"\0" * 32)
sparse = bytes([1, 4, 1, 1]) + bytes([1, ord("s"), 1, 8, 0]) + bytes([0, 0])
write("shard_map", "sparse", sparse + struct.pack("<4Q", 1, 2, 3, 1 << 63))
table = pb_bytes(1, pb_bytes(1, b"t") + pb_int(3, 10))
ranges = pb_bytes(2, pb_int(1, 0) + pb_int(2, 10) + pb_int(3, 0))
proto = pb_int(1, 7) + pb_bytes(2, pb_int(1, 0) + pb_bytes(2, b"tcp://a:1")) + \
    pb_bytes(3, table + ranges)
write("shard_map", "proto-dense", bytes([0]) + struct.pack("<Q", len(proto)) + proto)

# ---- store_format: selector, record bytes.
def init(segments):
    out = struct.pack("<QI", 42, len(segments))
    for b, e, kind, a, c in segments:
        out += struct.pack("<QQBff", b, e, kind, a, c)
    return out


def string(s):
    return struct.pack("<I", len(s)) + s


MAGIC = 0x52505354
write("store_format", "store-meta", bytes([0]) + struct.pack("<II", 2, 5))
write("store_format", "flush-record", bytes([1]) + struct.pack("<qB", 12, 1))
write("store_format", "table-dense", bytes([2]) + struct.pack("<IBI", MAGIC, 0, 1) +
      string(b"w") + struct.pack("<QQif", 0, 1000, 2, 0.0) +
      init([(0, 1000, 1, -0.1, 0.1)]) + struct.pack("<qqQI", 3, 4, 1, 16384))
write("store_format", "table-sparse", bytes([2]) + struct.pack("<IBI", MAGIC, 1, 2) +
      string(b"emb") + struct.pack("<Iif", 8, 3, 0.0) + init([(0, 8, 2, 0.0, 0.01)]) +
      struct.pack("<Qq", 100, 7))
write("store_format", "dense-key", bytes([3]) + b"z" + struct.pack(">IQBQ", 1, 2, 1, 3))
write("store_format", "row-key", bytes([4]) + b"r" + struct.pack(">IQ", 2, 99))
write("store_format", "staged-key", bytes([4]) + b"s" + struct.pack(">IQ", 2, 1 << 63))

# ---- checkpoint_manifest: mode (odd: append the checksum line), text.
body = (b"relaxps-checkpoint 1\nclock 40\nstore rocksdb\ntable w\ntable emb%20x\n"
        b"file 000012.sst 1024\nfile MANIFEST-000005 300\n")
write("checkpoint_manifest", "body", bytes([1]) + body)
write("checkpoint_manifest", "whole", bytes([0]) + body +
      b"crc32c %08x\n" % crc32c(body))
write("checkpoint_manifest", "minimal", bytes([1]) + b"relaxps-checkpoint 1\nclock 0\nstore memory\n")
# Version 2: small files packed after a data record, then "\n".
packed = (b"relaxps-checkpoint 2\nclock 41\nstore rocksdb\ntable w\nfile 000012.sst 1024\n"
          b"packed CURRENT 16\npacked OPTIONS-000007 5\ndata 21\nMANIFEST-000005\nopts\n\n")
write("checkpoint_manifest", "packed", bytes([1]) + packed)
