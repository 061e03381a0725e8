"""A stand-in OTLP receiver that records what arrives with each request: the path and headers
(HTTP) or the method and metadata (gRPC, through grpcio), one JSON object per line in OUT. It
answers every HTTP request with STATUS (200 by default; 401 or 503 to test failures) and every
gRPC call with an empty, successful response.

With CERT and KEY (PEM files), both listen with TLS.

Usage: header_stub.py OUT HTTP_PORT GRPC_PORT [STATUS [CERT KEY]]"""
import json
import ssl
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc

OUT, HTTP_PORT, GRPC_PORT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
STATUS = int(sys.argv[4]) if len(sys.argv) > 4 else 200
CERT, KEY = (sys.argv[5], sys.argv[6]) if len(sys.argv) > 6 else (None, None)
LOCK = threading.Lock()


def record(entry):
    with LOCK, open(OUT, "a") as f:
        f.write(json.dumps(entry) + "\n")


class Http(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        record({"transport": "http", "path": self.path, "status": STATUS,
                "headers": {k.lower(): v for k, v in self.headers.items()}})
        self.send_response(STATUS)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class AnyMethod(grpc.GenericRpcHandler):
    def service(self, details):
        def handle(request, context):
            record({"transport": "grpc", "path": details.method,
                    "headers": {k: v for k, v in details.invocation_metadata}})
            return b""
        return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=None, response_serializer=None)


server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
server.add_generic_rpc_handlers((AnyMethod(),))
if CERT:
    with open(KEY, "rb") as k, open(CERT, "rb") as c:
        server.add_secure_port(f"127.0.0.1:{GRPC_PORT}", grpc.ssl_server_credentials([(k.read(), c.read())]))
else:
    server.add_insecure_port(f"127.0.0.1:{GRPC_PORT}")
server.start()
http = ThreadingHTTPServer(("127.0.0.1", HTTP_PORT), Http)
if CERT:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(CERT, KEY)
    http.socket = context.wrap_socket(http.socket, server_side=True)
http.serve_forever()
