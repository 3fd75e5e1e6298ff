"""W&B's offline transaction log (`.wandb`) read back record by record, for the tests of what a
run sends W&B."""
from __future__ import annotations

from pathlib import Path


def wandb_records(path):
    """Read the records of a W&B transaction log (.wandb): LevelDB-style 32 KiB blocks of
    checksum(4) length(2) type(1) chunks holding protobuf `Record`s."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, buf = Path(path).read_bytes(), 7, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0 and length == 0:
            pos += left - 7
            continue
        buf += data[pos:pos + length]
        pos += length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            yield record


def wandb_log_bytes(records, block: int = 32768) -> bytes:
    """A W&B transaction log holding `records` (protobuf `Record`s), as wandb-core writes one: the
    header, then each record in chunks (FULL, or FIRST, MIDDLE..., LAST across blocks), a block's
    last bytes padded with zeros where a chunk header no longer fits."""
    import struct
    import zlib

    out = bytearray(b":W&B\xe1\xbe\x00")
    for record in records:
        data, first = record.SerializeToString(), True
        while True:
            left = block - len(out) % block
            if left < 7:
                out += bytes(left)
                continue
            piece, data = data[:left - 7], data[left - 7:]
            kind = (1 if not data else 2) if first else (4 if not data else 3)
            out += struct.pack("<IHB", zlib.crc32(piece, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF, len(piece), kind)
            out += piece
            first = False
            if not data:
                break
    return bytes(out)
