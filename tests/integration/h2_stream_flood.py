#!/usr/bin/python3
"""Opens many HTTP/2 streams on one connection to a gRPC server, as a hostile client would, with
hand-built frames (RFC 9113; no HTTP/2 library): each stream a GetAttention call's HEADERS, then
with --reset its DATA and an RST_STREAM at once (the "rapid reset" pattern). Reads whatever the
server sends for --hold seconds, then closes.

With --closed_window N it opens N connections instead, each with an initial flow-control window of
0 (SETTINGS_INITIAL_WINDOW_SIZE) and one whole ListModels call, and holds them for --hold seconds
without reading or ever opening the window: clients that ask and never take the answer.

    h2_stream_flood.py --port PORT [--streams 20000] [--reset] [--hold 3]
    h2_stream_flood.py --port PORT --closed_window 100 [--hold 3]
"""
import argparse
import socket
import struct
import time


def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def length_prefix(value):
    """HPACK's 7-bit prefix integer (RFC 7541 5.1) for a string length, Huffman off."""
    if value < 127:
        return bytes([value])
    out, value = [127], value - 127
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    return bytes(out + [value])


def literal(name, value):
    """A header field without indexing, with a new name (RFC 7541 6.2.2)."""
    return b"\x00" + length_prefix(len(name)) + name + length_prefix(len(value)) + value


def call_headers(method):
    return b"".join(literal(n, v) for n, v in [
        (b":method", b"POST"), (b":scheme", b"http"),
        (b":path", b"/attnscope.v1.AttentionService/" + method), (b":authority", b"127.0.0.1"),
        (b"content-type", b"application/grpc"), (b"te", b"trailers")])


HEADERS = call_headers(b"GetAttention")
# GetAttentionRequest{text: "hello world"} (field 2), as one gRPC message.
MESSAGE = b"\x12\x0bhello world"
BODY = b"\x00" + struct.pack(">I", len(MESSAGE)) + MESSAGE


def hold_closed_windows(port, connections, hold):
    headers = call_headers(b"ListModels")
    empty = b"\x00" + struct.pack(">I", 0)  # ListModelsRequest{}
    # SETTINGS_INITIAL_WINDOW_SIZE = 0, and the ACK of the server's SETTINGS, without which gRPC
    # leaves the window at its default.
    settings = frame(4, 0, 0, struct.pack(">HI", 4, 0)) + frame(4, 1, 0, b"")
    sockets = []
    for _ in range(connections):
        connection = socket.create_connection(("127.0.0.1", port))
        connection.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings +
                           frame(1, 4, 1, headers) + frame(0, 1, 1, empty))
        sockets.append(connection)
    time.sleep(hold)
    for connection in sockets:
        connection.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--streams", type=int, default=20000)
    parser.add_argument("--reset", action="store_true")
    parser.add_argument("--hold", type=float, default=3.0)
    parser.add_argument("--closed_window", type=int, default=0, metavar="N")
    args = parser.parse_args()
    if args.closed_window:
        hold_closed_windows(args.port, args.closed_window, args.hold)
        return
    connection = socket.create_connection(("127.0.0.1", args.port))
    connection.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
    buffer = b""
    try:
        for i in range(args.streams):
            stream = 1 + 2 * i
            if args.reset:
                buffer += (frame(1, 4, stream, HEADERS) + frame(0, 1, stream, BODY) +
                           frame(3, 0, stream, struct.pack(">I", 8)))  # RST_STREAM CANCEL
            else:
                buffer += frame(1, 4, stream, HEADERS)  # END_HEADERS, the stream left open
            if len(buffer) > 1 << 16:
                connection.sendall(buffer)
                buffer = b""
        connection.sendall(buffer)
    except OSError:
        pass  # the server closed the connection: what a bounded server may do
    connection.settimeout(0.2)
    end = time.time() + args.hold
    while time.time() < end:
        try:
            if not connection.recv(1 << 20):
                break
        except socket.timeout:
            pass
        except OSError:
            break
    connection.close()


if __name__ == "__main__":
    main()
