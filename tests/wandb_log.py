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
