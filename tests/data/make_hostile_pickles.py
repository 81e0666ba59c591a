#!/usr/bin/env python3
"""Writes hostile pytorch_model.bin files (torch.save's zip format) into OUT_DIR, one per case.

Each is what an attacker can hand a server that loads checkpoints with LibTorch's unpickler: the
pickle (data.pkl) is written opcode by opcode and the archive with Python's zipfile, so that the
files do not depend on attnscope's own code. valid.bin is a well-formed state dict in the same
hand-written form (a dict {"w": float32 [2, 3], "b": float16 [3]}), which LibTorch loads and the checks must
accept; torch_saved.bin is what torch.save itself writes for a model's state_dict() (an
OrderedDict with _metadata, as transformers' save_pretrained(safe_serialization=False) writes it,
a tensor that is a view at an offset, two tensors sharing a storage). The cases, and what LibTorch 1.13 did with each before attnscope checked the file first:

  nested_tuples      500,000 TUPLE1 around one value: a stack overflow (SIGSEGV) freeing it
  open_marks         3,000,000 MARKs: millions of stack entries for nothing
  string_4gb         a BINUNICODE claiming 4 GB in a file of a few bytes: 4 GB allocated
  memo_id_4e9        LONG_BINPUT of id 4,000,000,000: a memo table sized by the id
  deflated_1500mb    a referenced record deflated from 1.5 GB of zeros to 7 MB: inflated in full
  storage_beyond_record  a storage of 1,000,000 floats over a record of 24 bytes: read past its end
  tensor_beyond_storage  a [1000, 1000] tensor over a storage of 6 floats
  global_os_system   GLOBAL os.system (pickle's classic code execution)
  odd_setitems       SETITEMS with a key and no value: LibTorch reads past its stack
  list_nested_by_memo  lists nested 100,000 deep by filling memoized lists after placing them

Usage: make_hostile_pickles.py OUT_DIR [CASE ...]   (all cases when none is named)
"""
import os
import struct
import sys
import zipfile
import zlib

ARCHIVE = "archive"


class Pickle:
    """Protocol 2 opcodes, as Python's pickler writes them for torch.save."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")  # PROTO 2
        self.memo = 0

    def op(self, code):
        self.out += code
        return self

    def put(self):
        self.out += b"q" + bytes([self.memo]) if self.memo < 256 else b"r" + struct.pack(
            "<I", self.memo)
        self.memo += 1
        return self.memo - 1

    def get(self, memo_id):
        self.out += b"h" + bytes([memo_id]) if memo_id < 256 else b"j" + struct.pack(
            "<I", memo_id)
        return self

    def string(self, text):
        data = text.encode()
        self.out += b"X" + struct.pack("<I", len(data)) + data
        return self

    def int(self, value):
        if 0 <= value < 256:
            self.out += b"K" + bytes([value])
        elif 0 <= value < 65536:
            self.out += b"M" + struct.pack("<H", value)
        else:
            self.out += b"J" + struct.pack("<i", value)
        return self

    def global_(self, module, name):
        self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"
        return self

    def int_tuple(self, values):
        self.op(b"(")
        for value in values:
            self.int(value)
        return self.op(b"t")

    def tensor(self, storage_type, key, numel, offset, size, stride):
        """_rebuild_tensor_v2((storage ...), offset, size, stride, False, OrderedDict())."""
        self.global_("torch._utils", "_rebuild_tensor_v2")
        self.op(b"(")
        self.op(b"(").string("storage").global_("torch", storage_type).string(key)
        self.string("cpu").int(numel).op(b"t").op(b"Q")  # BINPERSID
        self.int(offset).int_tuple(size).int_tuple(stride).op(b"\x89")  # NEWFALSE
        self.global_("collections", "OrderedDict").op(b")").op(b"R")
        return self.op(b"t").op(b"R")

    def state_dict(self, tensors, ordered=True):
        """An OrderedDict (else a dict) of name -> tensor(args), filled by one SETITEMS."""
        if ordered:
            self.global_("collections", "OrderedDict").op(b")").op(b"R")
        else:
            self.op(b"}")
        self.put()
        self.op(b"(")
        for name, args in tensors:
            self.string(name)
            self.tensor(*args)
        return self.op(b"u")

    def stop(self):
        return bytes(self.out + b".")


VALID_TENSORS = [("w", ("FloatStorage", "0", 6, 0, (2, 3), (3, 1))),
                 ("b", ("HalfStorage", "1", 3, 0, (3,), (1,)))]
VALID_RECORDS = {"0": struct.pack("<6f", 1, 2, 3, 4, 5, 6), "1": struct.pack("<3e", 0.5, 1, 2)}


def write_archive(path, pickle, records, deflated=()):
    """An archive as torch.save lays it out: data.pkl, data/<key> records, version."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        archive.writestr(f"{ARCHIVE}/data.pkl", pickle)
        for key, data in records.items():
            archive.writestr(f"{ARCHIVE}/data/{key}", data)
        for key, size in deflated:
            info = zipfile.ZipInfo(f"{ARCHIVE}/data/{key}")
            info.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(info, "w", force_zip64=True) as entry:
                zeros = bytes(1 << 24)
                for _ in range(size >> 24):
                    entry.write(zeros)
        archive.writestr(f"{ARCHIVE}/version", "3\n")


def main():
    out = sys.argv[1]
    wanted = set(sys.argv[2:])
    os.makedirs(out, exist_ok=True)

    def write(name, pickle, records, deflated=()):
        if not wanted or name in wanted:
            write_archive(os.path.join(out, name + ".bin"), pickle, records, deflated)

    # A dict: LibTorch 1.13's unpickler makes an OrderedDict None, so it loads no OrderedDict.
    write("valid", Pickle().state_dict(VALID_TENSORS, ordered=False).stop(), VALID_RECORDS)
    if not wanted or "torch_saved" in wanted:
        import collections
        import torch  # python3-torch, only for this case
        base = torch.arange(12, dtype=torch.float32)
        state = collections.OrderedDict([("w", base[2:8].view(2, 3)), ("tied", base[2:8].view(2, 3)),
                                         ("b", torch.tensor([0.5, 1, 2], dtype=torch.bfloat16))])
        state._metadata = collections.OrderedDict([("", {"version": 1})])
        torch.save(state, os.path.join(out, "torch_saved.bin"))

    nested = Pickle().op(b")")
    nested.out += b"\x85" * 500_000  # TUPLE1
    write("nested_tuples", nested.stop(), {})

    marks = Pickle()
    marks.out += b"(" * 3_000_000
    write("open_marks", marks.op(b"N").stop(), {})

    string = Pickle()
    string.out += b"X" + struct.pack("<I", 0xFFFFFFFF) + b"abc"
    write("string_4gb", string.stop(), {})

    memo = Pickle().op(b"N")
    memo.out += b"r" + struct.pack("<I", 4_000_000_000)
    write("memo_id_4e9", memo.stop(), {})

    big = 1500 << 20
    write("deflated_1500mb",
          Pickle().state_dict(VALID_TENSORS + [
              ("unused.big", ("FloatStorage", "2", big // 4, 0, (big // 4,), (1,)))]).stop(),
          VALID_RECORDS, deflated=[("2", big)])

    write("storage_beyond_record",
          Pickle().state_dict([("w", ("FloatStorage", "0", 1_000_000, 0, (1_000_000,),
                                      (1,)))]).stop(), VALID_RECORDS)

    write("tensor_beyond_storage",
          Pickle().state_dict([("w", ("FloatStorage", "0", 6, 0, (1000, 1000),
                                      (1000, 1)))]).stop(), VALID_RECORDS)

    write("global_os_system",
          Pickle().global_("os", "system").string("true").op(b"\x85").op(b"R").stop(), {})

    odd = Pickle().op(b"}").op(b"(").string("key").op(b"u")
    write("odd_setitems", odd.stop(), {})

    # Lists placed in their parent first and filled after, through the memo: each list is one
    # level deep when placed, so a checker that only adds depths as containers are built sees 2.
    lists = Pickle()
    count = 100_000
    # NEWOBJ pops one value in LibTorch's unpickler, which has no POP.
    for _ in range(count):
        lists.op(b"]")
        lists.put()
        lists.op(b"\x81")  # the list stays reachable through the memo only
    for i in range(count - 1):
        lists.get(i).op(b"(").get(i + 1).op(b"e")  # APPENDS list i+1 to list i
        lists.op(b"\x81")
    write("list_nested_by_memo", lists.get(0).stop(), {})


if __name__ == "__main__":
    main()
