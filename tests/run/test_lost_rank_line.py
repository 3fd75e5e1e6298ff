"""The line a rank prints when another rank is lost (`distributed.lost_line`), over the shapes torch's
messages take (gloo's C++ source path first, its peer's address, its own words, c10d's "Exception
raised from ..." and stack frames after): one line in pazo's words, saying whether a peer stopped
answering in time or its connection ended, naming the peer where the message does; torch's text is
kept whole for train.log (was: gloo's first line as it came, "[../third_party/gloo/.../pair.cc:534]
Read error ... GLHF!" on the terminal)."""
import logging

from hypothesis import given, strategies as st

from pazo.run import distributed

LOST = ["Connection closed by peer", "Read error", "Connection reset by peer", "GLHF!", "Broken pipe",
        "Write error", "Socket closed", "ProcessGroupGloo::allgather: connection refused"]
TIMED_OUT = ["Timed out waiting 30000ms for recv operation to complete", "Socket Timeout",
             "Operation timed out!", "wait timeout after 300000ms", "Read timeout"]
SOURCE = st.sampled_from(["", "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] ",
                          "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] ",
                          "[enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "])
PEER = st.one_of(st.none(), st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255),
                                      st.integers(0, 255)).map(lambda a: ".".join(map(str, a))),
                 st.sampled_from(["::1", "fe80::1", "fe80::1%eth0", "::ffff:10.0.0.2", "node-07.cluster"]))
FRAME = st.builds(lambda n, name: f"frame #{n}: {name} + 0x{n * 97:x} (0x7f00 in /torch/lib/libtorch_cpu.so)",
                  st.integers(0, 40), st.sampled_from(["c10::Error::Error(c10::SourceLocation, std::string)",
                                                       "gloo::transport::tcp::Pair::handleReadWrite(int)",
                                                       "<unknown function>"]))
TRAILER = st.one_of(st.just(""), st.lists(FRAME, min_size=1, max_size=6).map(
    lambda frames: "\nException raised from recvBytes at ../torch/csrc/distributed/c10d/Utils.hpp:672 "
                   "(most recent call first):\n" + "\n".join(frames)))


@given(source=SOURCE, words=st.sampled_from(LOST + TIMED_OUT), peer=PEER, trailer=TRAILER,
       exc=st.sampled_from([RuntimeError, distributed.dist.DistBackendError]))
def test_a_lost_rank_is_one_line_of_pazos_words_whatever_torch_said(source, words, peer, trailer, exc):
    addressed = f"{words} [{peer}]:41865" if peer else words
    raw = f"{source}{addressed}{trailer}"
    lost = distributed.lost_rank(exc(raw))
    line = str(lost)
    assert "\n" not in line and line.startswith("another rank of this run stopped answering: ")
    assert line.endswith("; the run ended on every rank")
    for torch_text in ("gloo", ".cc", ".hpp", "frame #", "c10", "0x", "GLHF", words):
        assert torch_text not in line, (torch_text, line)
    timed_out = words in TIMED_OUT
    assert ("within train.distributed_timeout_s" in line) == timed_out and ("connection" in line) != timed_out
    assert (f"(at {peer})" in line) == (peer is not None), line
    assert lost.raw == raw   # kept whole, for train.log


def test_the_lost_ranks_raw_message_goes_to_the_log_file_only(caplog):
    from pazo.commands.console import LOG_FILE_ONLY
    from pazo.train import _log_torch_message

    raw = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:41865"
    with caplog.at_level(logging.INFO, logger="pazo.train"):
        _log_torch_message(distributed.lost_rank(RuntimeError(raw)))
        _log_torch_message(distributed.RankLost("a line of pazo's"))   # (nothing raw: nothing logged)
    [record] = caplog.records
    assert raw in record.getMessage() and all(getattr(record, k) == v for k, v in LOG_FILE_ONLY.items())
