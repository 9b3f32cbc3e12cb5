# A stand-in for `opencode serve` that records every request's method, path and Authorization
# header (one JSON line each, to argv[2]) and writes the port it listens on to argv[1]. With
# argv[3], a request whose Authorization is not that value gets a 401, as opencode does when
# OPENCODE_SERVER_PASSWORD is set. Started as `exec -a opencode python3 standin.py ...`, so
# discovery takes it for opencode.
import http.server
import json
import sys

port_file, log_file = sys.argv[1], sys.argv[2]
need = sys.argv[3] if len(sys.argv) > 3 else None


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        got = self.headers.get("Authorization")
        with open(log_file, "a") as f:
            f.write(json.dumps({"method": "GET", "path": self.path, "auth": got}) + "\n")
        if need is not None and got != need:
            return self.reply(401, {"error": "unauthorized"})
        path = self.path.split("?")[0]
        if path == "/global/health":
            return self.reply(200, {"healthy": True, "version": "1.18.33"})
        if path in ("/project", "/session") or path.startswith("/session/"):
            return self.reply(200, [] if path != "/session/status" else {})
        return self.reply(200, {})


s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(s.server_address[1]))
import os
os.rename(port_file + ".tmp", port_file)
s.serve_forever()
