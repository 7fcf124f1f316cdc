"""Handing a torch CUDA stream to CuPy (no GPU needed: fakes stand in for both sides)."""


class _FakeCupy:
    """Just enough of cupy.cuda for cupy_stream_of: records which constructor it used."""

    def __init__(self, protocol: bool):
        calls = self.calls = []

        class Stream:
            pass
        if protocol:
            Stream.from_external = staticmethod(lambda obj: calls.append(("from_external", obj))
                                                or "protocol-stream")

        class cuda:
            pass
        cuda.Stream = Stream
        cuda.ExternalStream = staticmethod(lambda ptr: calls.append(("ExternalStream", ptr))
                                           or "handle-stream")
        self.cuda = cuda


class _TorchStream:
    cuda_stream = 1234


class _ProtocolTorchStream(_TorchStream):
    def __cuda_stream__(self):
        return (0, self.cuda_stream)


def test_cupy_stream_of_prefers_the_stream_protocol():
    """CuPy 14 deprecates ExternalStream: the torch stream goes through from_external when
    both sides speak the CUDA stream protocol, else its handle through ExternalStream."""
    from marlin_cupy.ops import cupy_stream_of
    ts = _ProtocolTorchStream()
    cp14 = _FakeCupy(protocol=True)
    assert cupy_stream_of(ts, cp14) == "protocol-stream"
    assert cp14.calls == [("from_external", ts)]
    cp13 = _FakeCupy(protocol=False)                      # CuPy 13: no from_external
    assert cupy_stream_of(ts, cp13) == "handle-stream"
    assert cp13.calls == [("ExternalStream", 1234)]
    old_torch = _TorchStream()                            # a torch without the protocol
    cp14 = _FakeCupy(protocol=True)
    assert cupy_stream_of(old_torch, cp14) == "handle-stream"
    assert cp14.calls == [("ExternalStream", 1234)]
