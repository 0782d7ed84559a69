"""A reader of TensorBoard event files, standard library only, written from
the format's description (TensorFlow's record_writer.cc, event.proto,
summary.proto), not from hpod's writer: tests/api/test_tensorboard.py
reads what hpod wrote with it.

A file is a sequence of records
    uint64 length | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
(little-endian; mask(c) = ((c >> 15 | c << 17) + 0xa282ead8) mod 2^32),
each data an Event protobuf: wall_time (1, double), step (2, int64),
file_version (3, string), summary (5, Summary: repeated value (1, Value:
tag (1, string), simple_value (2, float))). Every CRC is checked; a
truncated or corrupt record raises ValueError."""
import os
import struct


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    """The data of every record of an event file's bytes, both CRCs checked."""
    out, i = [], 0
    while i < len(blob):
        if len(blob) - i < 12:
            raise ValueError("truncated record header at %d" % i)
        head = blob[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", blob[i + 8:i + 12])
        if hcrc != masked_crc(head):
            raise ValueError("bad length CRC at %d" % i)
        data = blob[i + 12:i + 12 + n]
        if len(data) != n or len(blob) < i + 16 + n:
            raise ValueError("truncated record at %d" % i)
        (dcrc,) = struct.unpack("<I", blob[i + 12 + n:i + 16 + n])
        if dcrc != masked_crc(data):
            raise ValueError("bad data CRC at %d" % i)
        out.append(data)
        i += 16 + n
    return out


def _varint(b, i):
    v, shift = 0, 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i


def fields(msg):
    """(field number, wire type, value) of a protobuf message: ints for
    varints, bytes for the rest (fixed64/fixed32 raw little-endian)."""
    out, i = [], 0
    while i < len(msg):
        key, i = _varint(msg, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(msg, i)
        elif wt == 1:
            v, i = msg[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(msg, i)
            v, i = msg[i:i + n], i + n
        elif wt == 5:
            v, i = msg[i:i + 4], i + 4
        else:
            raise ValueError("unsupported wire type %d" % wt)
        if i > len(msg):
            raise ValueError("field %d runs past the message" % num)
        out.append((num, wt, v))
    return out


def event(data):
    """An Event as a dict: wall_time, step, and file_version or values
    ({tag: simple_value})."""
    ev = {"wall_time": None, "step": 0, "file_version": None, "values": None}
    for num, wt, v in fields(data):
        if num == 1 and wt == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wt == 0:
            ev["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 3 and wt == 2:
            ev["file_version"] = v.decode()
        elif num == 5 and wt == 2:
            values = {}
            for snum, swt, value in fields(v):
                if snum != 1 or swt != 2:
                    continue
                tag, simple = None, None
                for vnum, vwt, x in fields(value):
                    if vnum == 1 and vwt == 2:
                        tag = x.decode()
                    elif vnum == 2 and vwt == 5:
                        simple = struct.unpack("<f", x)[0]
                if tag is not None and simple is not None:
                    values[tag] = simple
            ev["values"] = values
    return ev


def read_file(path):
    with open(path, "rb") as f:
        return [event(r) for r in records(f.read())]


def event_files(run_dir):
    """The event files of a run folder, in the order TensorBoard reads them."""
    return sorted(os.path.join(run_dir, n) for n in os.listdir(run_dir) if "tfevents" in n)
