"""An OTLP/HTTP collector that misbehaves on purpose, for the fault-injection tests. It writes
one JSON line per request it sees to OUT ({"t": unix seconds, "path": ..., "bytes": body size,
"status": its answer}).

MODE:
  hang            accept, read the request, never answer (a collector stuck in GC)
  drop            accept, read the request head, close the connection without answering
  status:CODE     answer every request with CODE
  status:CODE:S   the same with a Retry-After of S seconds
  flap:N          N requests answered 200, then N answered 503, and so on
  redirect:CODE:PORT
                  answer CODE (301, 302, 307, 308) with a Location on 127.0.0.1:PORT
  partial:N:MSG   answer 200 with an OTLP partial success: N points (or log records)
                  rejected, with the message MSG
  limit:BYTES     answer 413 to a body larger than BYTES (as sent, compressed or not), else 200
  throttle:N:S    answer the first N requests 429 with a Retry-After of S seconds, then 200
  first:CODE:N    answer the first N requests CODE (413: too large), then 200
  grpc-exhausted:S:N
                  over gRPC (grpcio): answer the first N calls RESOURCE_EXHAUSTED with a
                  google.rpc.RetryInfo of S seconds in grpc-status-details-bin, then OK

Usage: faulty_collector.py MODE OUT PORT"""
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE, OUT, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
LOCK = threading.Lock()
COUNT = [0]


def record(path, size=None, status=None):
    with LOCK, open(OUT, "a") as f:
        f.write(json.dumps({"t": time.time(), "path": path, "bytes": size, "status": status}) + "\n")
        COUNT[0] += 1
        return COUNT[0]


def raw(behaviour):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", PORT))
    server.listen(128)
    held = []
    while True:
        conn, _ = server.accept()
        try:
            head = conn.recv(65536)
        except OSError:
            head = b""
        line = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
        record(line.split(" ")[1] if " " in line else line)
        if behaviour == "hang":
            held.append(conn)
        else:
            conn.close()


def varint(n):
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def partial_success(rejected, message):
    """Export{Metrics,Logs}ServiceResponse { partial_success = 1 { rejected = 1; message = 2 } },
    encoded by hand: both responses have the same field numbers."""
    text = message.encode()
    inner = b"\x08" + varint(rejected) + b"\x12" + varint(len(text)) + text
    return b"\x0a" + varint(len(inner)) + inner


class Http(BaseHTTPRequestHandler):
    def do_GET(self):
        # Where a followed redirect would land: a body-less GET.
        record("GET " + self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        parts = MODE.split(":")
        with LOCK:
            n = COUNT[0] + 1
        if parts[0] == "limit":
            code = 413 if length > int(parts[1]) else 200
        elif parts[0] == "throttle":
            code = 429 if n <= int(parts[1]) else 200
        elif parts[0] == "first":
            code = int(parts[1]) if n <= int(parts[2]) else 200
        else:
            code = None
        record(self.path, length, code)
        retry_after = None
        body = b""
        if parts[0] in ("limit", "throttle", "first"):
            self.send_response(code)
            if code == 429:
                self.send_header("Retry-After", parts[2])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if parts[0] == "redirect":
            self.send_response(int(parts[1]))
            self.send_header("Location", f"http://127.0.0.1:{parts[2]}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if parts[0] == "partial":
            code = 200
            body = partial_success(int(parts[1]), ":".join(parts[2:]))
        elif parts[0] == "status":
            code = int(parts[1])
            retry_after = parts[2] if len(parts) > 2 else None
        else:  # flap:N
            block = int(parts[1])
            code = 200 if ((n - 1) // block) % 2 == 0 else 503
        self.send_response(code)
        if retry_after:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def retry_info_status(seconds):
    """google.rpc.Status { code = 8 (RESOURCE_EXHAUSTED); message; details = [Any { RetryInfo {
    retry_delay = Duration { seconds } } }] }, encoded by hand."""
    duration = b"\x08" + varint(seconds)
    retry = b"\x0a" + varint(len(duration)) + duration
    url = b"type.googleapis.com/google.rpc.RetryInfo"
    any_ = b"\x0a" + varint(len(url)) + url + b"\x12" + varint(len(retry)) + retry
    message = b"slow down"
    return b"\x08\x08" + b"\x12" + varint(len(message)) + message + b"\x1a" + varint(len(any_)) + any_


def grpc_exhausted(seconds, first):
    from concurrent import futures

    import grpc

    class AnyMethod(grpc.GenericRpcHandler):
        def service(self, details):
            def handle(request, context):
                with LOCK:
                    n = COUNT[0] + 1
                if n <= first:
                    record(details.method, len(request), 8)
                    context.set_trailing_metadata((("grpc-status-details-bin", retry_info_status(seconds)),))
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down")
                record(details.method, len(request), 0)
                return b""
            return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=None, response_serializer=None)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((AnyMethod(),))
    server.add_insecure_port(f"127.0.0.1:{PORT}")
    server.start()
    server.wait_for_termination()


if MODE in ("hang", "drop"):
    raw(MODE)
elif MODE.startswith("grpc-exhausted:"):
    grpc_exhausted(int(MODE.split(":")[1]), int(MODE.split(":")[2]))
else:
    ThreadingHTTPServer(("127.0.0.1", PORT), Http).serve_forever()
