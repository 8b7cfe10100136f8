"""An OTLP/HTTP logs receiver built from the official protobuf definitions (PyPI's
opentelemetry-proto), for guard's tests: it decodes every request as an
ExportLogsServiceRequest and writes one JSON line per log record to OUT, with the body's
AnyValue turned back into plain JSON, so a test compares what guard sent with its JSONL log.

Usage: otlp_receiver.py OUT [--status CODE] [--delay SECONDS]
Prints its port on the first line of stdout once it listens (127.0.0.1, a free port).
--status makes it answer every request with CODE (and decode nothing): a receiver that fails.
--delay makes it wait that long before answering: a slow receiver.
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2


def plain(any_value):
    """An AnyValue as the JSON value it was made from."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "kvlist_value":
        return {kv.key: plain(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "array_value":
        return [plain(v) for v in any_value.array_value.values]
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes(key_values):
    return {kv.key: plain(kv.value) for kv in key_values}


class Receiver(BaseHTTPRequestHandler):
    lock = threading.Lock()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        data = self.rfile.read(length)
        if self.server.delay:
            time.sleep(self.server.delay)
        if self.server.status != 200:
            self.send_response(self.server.status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path != "/v1/logs" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        request = logs_service_pb2.ExportLogsServiceRequest()
        request.ParseFromString(data)
        lines = []
        for resource_logs in request.resource_logs:
            resource = attributes(resource_logs.resource.attributes)
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    lines.append(json.dumps({
                        "resource": resource,
                        "scope": scope_logs.scope.name,
                        "time_unix_nano": record.time_unix_nano,
                        "observed_time_unix_nano": record.observed_time_unix_nano,
                        "severity_number": record.severity_number,
                        "severity_text": record.severity_text,
                        "event_name": record.event_name,
                        "attributes": attributes(record.attributes),
                        "body": plain(record.body),
                    }))
        with Receiver.lock, open(self.server.out, "a", encoding="utf-8") as out:
            for line in lines:
                out.write(line + "\n")
        answer = logs_service_pb2.ExportLogsServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.out, server.status, server.delay = args.out, args.status, args.delay
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
