#!/usr/bin/env python3
"""A recording forwarder for .ci/harness.sh: listens on PORT, passes every
request to UPSTREAM unchanged (streamed replies stream through), and writes
one JSON line per request to LOG: the harness name given by a
"/_harness/NAME" path prefix (stripped before forwarding), the method, the
path and the request headers as sent (names lower-cased, in order).

The harness check turns these lines into the header captures it compares
with testdata/harness/*.json (python3 .ci/capture.py summarise ...).

    capture.py serve PORT UPSTREAM LOG
    capture.py summarise LOG HARNESS VERSION API SESSION OUT
    capture.py compare GOT WANT
"""
import http.client
import http.server
import json
import sys
import threading
import urllib.parse

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}
# Headers whose values change from run to run or carry the key: the capture
# keeps their names, not their values.
VOLATILE = {"content-length", "host", "authorization", "x-api-key", "date", "x-stainless-retry-count",
            "x-stainless-timeout", "traceparent", "sentry-trace", "baggage", "x-client-request-id",
            "x-codex-turn-metadata", "x-codex-window-id", "content-type", "accept-encoding", "content-encoding"}


def serve(port, upstream, log):
    up = urllib.parse.urlsplit(upstream)
    lock = threading.Lock()

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def handle_one(self):
            path, harness = self.path, ""
            if path.startswith("/_harness/"):
                rest = path[len("/_harness/"):]
                harness, _, tail = rest.partition("/")
                path = "/" + tail
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        break
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                body = b"".join(chunks)
            fields = {}
            if not self.headers.get("Content-Encoding"):
                try:
                    fields = strings(json.loads(body or b"{}"))
                except ValueError:
                    pass
            with lock, open(log, "a") as f:
                f.write(json.dumps({"harness": harness, "method": self.command, "path": path,
                                    "headers": [[k.lower(), v] for k, v in self.headers.items()],
                                    "body_strings": fields}) + "\n")
            hdrs = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "host"}
            hdrs["Content-Length"] = str(len(body))
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=300)
            conn.request(self.command, path, body=body if self.command != "GET" else None, headers=hdrs)
            resp = conn.getresponse()
            self.send_response_only(resp.status, resp.reason)
            length = resp.getheader("Content-Length")
            for k, v in resp.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            if length is not None:
                self.send_header("Content-Length", length)
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while True:
                data = resp.read1(65536) if length is None else resp.read(65536)
                if not data:
                    break
                if length is None:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                else:
                    self.wfile.write(data)
                self.wfile.flush()
            if length is None:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            conn.close()

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = handle_one

    http.server.ThreadingHTTPServer.daemon_threads = True
    http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()


def strings(v, prefix="", depth=0):
    """The string values of a JSON body's objects (not its arrays: those are
    the conversation), by dotted path, three levels deep."""
    out = {}
    if isinstance(v, dict) and depth < 3:
        for k, x in v.items():
            if isinstance(x, str):
                out[prefix + k] = x
            elif isinstance(x, dict):
                out.update(strings(x, prefix + k + ".", depth + 1))
    return out


def mask(v, session):
    """A value that carries the session id, written so it is the same from
    run to run: the id as <session>, and of a JSON object only the members
    that carry the id (the rest are turn ids, clocks and install ids)."""
    try:
        obj = json.loads(v)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        keep = {k: str(x).replace(session, "<session>") for k, x in obj.items() if session in str(x)}
        return json.dumps(keep, sort_keys=True, separators=(",", ":"))
    return v.replace(session, "<session>")


def summarise(log, harness, version, api, session, out):
    """The capture of one harness run: its model calls (POSTs), the header
    names each sent (their union, sorted), the values of the stable ones
    (the session id written as <session>), and which headers carried the
    session id the harness reported."""
    names, values, carriers, paths, fields = set(), {}, set(), set(), set()
    calls = 0
    for line in open(log):
        r = json.loads(line)
        if r["harness"] != harness or r["method"] != "POST":
            continue
        calls += 1
        paths.add(r["path"])
        for k, v in r["headers"]:
            names.add(k)
            if session and session in v:
                carriers.add(k)
                values.setdefault(k, mask(v, session))
                continue
            if k in VOLATILE or k.startswith("x-stainless-") or k == "user-agent":
                continue
            values.setdefault(k, v)
        for k, v in r.get("body_strings", {}).items():
            if session and session in v:
                fields.add(k + "=" + mask(v, session))
    cap = {"harness": harness, "version": version, "api": api, "calls": calls, "paths": sorted(paths),
           "header_names": sorted(names), "session_headers": sorted(carriers), "session_body_fields": sorted(fields),
           "headers": dict(sorted(values.items()))}
    with open(out, "w") as f:
        json.dump(cap, f, indent=2)
        f.write("\n")


def compare(got, want):
    g, w = json.load(open(got)), json.load(open(want))
    diffs = []
    for key in ("api", "paths", "header_names", "session_headers", "session_body_fields", "headers"):
        if g.get(key) != w.get(key):
            diffs.append("%s: captured %s, testdata has %s" % (key, json.dumps(g.get(key)), json.dumps(w.get(key))))
    if diffs:
        print("\n".join(diffs))
        sys.exit(1)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "serve":
        serve(int(args[0]), args[1], args[2])
    elif cmd == "summarise":
        summarise(*args)
    elif cmd == "compare":
        compare(*args)
    else:
        sys.exit("capture.py: unknown command %r" % cmd)
