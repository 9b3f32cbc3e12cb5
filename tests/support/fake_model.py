#!/usr/bin/env python3
"""A scripted stand-in for an OpenAI-compatible model server (stdlib only), for driving a real
`opencode serve` offline. It speaks the real protocol over real HTTP: POST /v1/chat/completions,
streaming (SSE chunks, tool_calls deltas, a usage chunk, [DONE]) or not.

How a request picks its answer (stateless, so opencode's own retries land on the same step):
  * Requests without tools (title generation, summaries) get a short plain-text answer.
  * Otherwise the LAST user message containing `SCRIPT:<name>` selects scenarios.SCRIPTS[name];
    the step index is the number of assistant messages after that user message.
  * An exhausted script answers with the text "Done.".
  * A name that scenarios.py does not know is looked up as scripts/<name>.json next to the port
    file (tests write generated scripts there: a list of steps in the same shape).
Step keys: tool+args | tools:[{tool,args}] | text; optional delay (s), fail_first + fail_status
+ fail_type (the first N requests of that step get an HTTP error), hang (s: stream the role chunk,
then stall for that long before closing without finishing).
"{ROOT}" in arguments becomes the "Working directory:" of opencode's system prompt.

    python3 fake_model.py --port 0 --port-file /tmp/port
"""
import argparse
import json
import os
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scenarios  # noqa: E402

MARKER = re.compile(r"SCRIPT:([A-Za-z0-9_.\-]+)")
FAILS = {}
SCRIPT_DIR = None


def script_named(name):
    if name in scenarios.SCRIPTS:
        return scenarios.SCRIPTS[name]
    if SCRIPT_DIR:
        try:
            with open(os.path.join(SCRIPT_DIR, name + ".json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None
    return None
LOCK = threading.Lock()


def text_of(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join((c.get("text") or "") if isinstance(c, dict) else str(c) for c in content)
    return ""


def subst(obj, root):
    if isinstance(obj, str):
        return obj.replace("{ROOT}", root)
    if isinstance(obj, list):
        return [subst(x, root) for x in obj]
    if isinstance(obj, dict):
        return {k: subst(v, root) for k, v in obj.items()}
    return obj


def decide(body):
    msgs = body.get("messages") or []
    system = "\n".join(text_of(m.get("content")) for m in msgs if m.get("role") == "system")
    if not body.get("tools") or "title generator" in system.lower():
        return None, None, {"text": "Scripted session"}
    users = [(i, text_of(m.get("content"))) for i, m in enumerate(msgs) if m.get("role") == "user"]
    for i, t in reversed(users):
        mm = MARKER.search(t)
        if mm:
            name = mm.group(1)
            script = script_named(name)
            if script is None:
                return name, None, {"text": "Unknown script " + name}
            step = sum(1 for m in msgs[i + 1:] if m.get("role") == "assistant")
            if step >= len(script):
                return name, step, {"text": "Done."}
            root = re.search(r"Working directory:\s*(\S+)", system)
            return name, step, subst(script[step], root.group(1) if root else os.getcwd())
    return None, None, {"text": "No script."}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            return self.reply(200, {"object": "list", "data": [{"id": "sim-model", "object": "model"}]})
        self.reply(200, {"ok": True})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        if not self.path.endswith("/chat/completions"):
            return self.reply(404, {"error": {"message": "not found"}})
        name, idx, step = decide(body)
        if step.get("fail_first"):
            key = (name, idx)
            with LOCK:
                seen = FAILS.get(key, 0)
                FAILS[key] = seen + 1
            if seen < step["fail_first"]:
                return self.reply(step.get("fail_status", 503), {"error": {
                    "message": "scripted failure", "type": step.get("fail_type", "server_error"), "code": None}})
        if step.get("delay"):
            time.sleep(float(step["delay"]))
        calls = [(step["tool"], step.get("args", {}))] if "tool" in step else []
        calls += [(t["tool"], t.get("args", {})) for t in step.get("tools", [])]
        text = "" if calls else step.get("text", "")
        model = body.get("model", "sim-model")
        cid = "chatcmpl-" + uuid.uuid4().hex[:12]
        prompt_tokens = sum(len(json.dumps(m)) for m in body.get("messages") or []) // 4
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 20, "total_tokens": prompt_tokens + 20}
        tcs = [{"id": "call_" + uuid.uuid4().hex[:16], "type": "function",
                "function": {"name": n_, "arguments": json.dumps(a)}} for n_, a in calls]
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            msg = {"role": "assistant", "content": text or None}
            if tcs:
                msg["tool_calls"] = tcs
            return self.reply(200, {"id": cid, "object": "chat.completion", "created": int(time.time()),
                                    "model": model, "usage": usage,
                                    "choices": [{"index": 0, "message": msg, "finish_reason": finish}]})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(delta, fin=None, extra=None):
            obj = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": fin}] if delta is not None else []}
            obj.update(extra or {})
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        try:
            chunk({"role": "assistant", "content": ""})
            if step.get("hang"):
                time.sleep(float(step["hang"]))
                self.close_connection = True
                return
            if text:
                chunk({"content": text})
            for i, t in enumerate(tcs):
                chunk({"tool_calls": [{"index": i, "id": t["id"], "type": "function",
                                       "function": {"name": t["function"]["name"],
                                                    "arguments": t["function"]["arguments"]}}]})
            chunk({}, finish)
            chunk(None, extra={"usage": usage})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file")
    a = p.parse_args()
    global SCRIPT_DIR
    if a.port_file:
        SCRIPT_DIR = os.path.join(os.path.dirname(os.path.abspath(a.port_file)), "scripts")
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(str(srv.server_address[1]))
        os.replace(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
