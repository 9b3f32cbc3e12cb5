#!/usr/bin/env python3
"""A scripted stand-in for the model servers Claude Code and Codex CLI talk to (stdlib only), for
driving the real agents offline. It speaks the real protocols over real HTTP:

  POST /v1/messages    the Anthropic Messages API, streamed (Claude Code, ANTHROPIC_BASE_URL)
  POST /v1/responses   the OpenAI Responses API, streamed (Codex, a model provider whose
                       wire_api is "responses")

How a request picks its answer (stateless, so an agent's retries land on the same step):
  * A request that offers no tools gets a short plain-text answer.
  * The LAST user message containing `SCRIPT:<name>` selects scripts/<name>.json next to the
    port file (a list of steps); the step index is the number of model turns since that
    message (Anthropic: assistant messages; Responses: the highest step number in the ids of the
    calls since, plus one, since Codex sends calls back as separate items).
  * An exhausted script answers with the text "Done.".
Step keys: tool+args | tools:[{tool,args}] | text; optional delay (s). For Codex's freeform
apply_patch tool, args is the patch text; `namespace` (a call's, beside its tool) makes a Codex
function call in that namespace (`multi_agent_v1` for spawn_agent and wait_agent). "{ROOT}" in
arguments becomes the project directory (the agent's working directory, given by --root);
"{SPAWNED}" the thread id Codex answered the conversation's latest spawn_agent call with (its
function_call_output in the request's input). A subagent Codex spawns sends its own requests,
its first user message being the spawn_agent message: a `SCRIPT:<name>` there runs its own script.

    python3 agents_model.py --port 0 --port-file /tmp/x/port --root /tmp/x/proj
"""
import argparse
import json
import os
import re
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MARKER = re.compile(r"SCRIPT:([A-Za-z0-9_.\-]+)")
STEP_ID = re.compile(r"_s(\d+)_")
SCRIPT_DIR = None
ROOT = None


def text_of(content):
    """The plain text of a message's content (tool results left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(c.get("text") or "" for c in content
                         if isinstance(c, dict) and c.get("type") not in ("tool_result", "function_call_output"))
    return ""


def subst(obj):
    if isinstance(obj, str):
        return obj.replace("{ROOT}", ROOT or os.getcwd())
    if isinstance(obj, list):
        return [subst(x) for x in obj]
    if isinstance(obj, dict):
        return {k: subst(v) for k, v in obj.items()}
    return obj


def step_of(name, n):
    try:
        with open(os.path.join(SCRIPT_DIR, name + ".json")) as f:
            script = json.load(f)
    except (OSError, ValueError) as e:
        return {"text": f"script {name}: {e}"}
    return subst(script[n]) if n < len(script) else {"text": "Done."}


def calls_of(step):
    """The step's calls: (tool, args, namespace or None)."""
    return [(t["tool"], t.get("args", {}), t.get("namespace"))
            for t in ([step] if "tool" in step else step.get("tools", []))]


def spawned(items):
    """The thread id of the latest spawn_agent call's answer (`{"agent_id": ..., "nickname": ...}`)."""
    spawns = {it.get("call_id") for it in items if isinstance(it, dict)
              and it.get("type") == "function_call" and it.get("name") == "spawn_agent"}
    for it in reversed(items):
        if isinstance(it, dict) and it.get("type") == "function_call_output" and it.get("call_id") in spawns:
            out = it.get("output")
            if isinstance(out, list):
                out = "".join(c.get("text") or "" for c in out if isinstance(c, dict))
            try:
                return json.loads(out)["agent_id"]
            except (TypeError, ValueError, KeyError):
                return "{SPAWNED: no agent_id in %r}" % (out,)
    return "{SPAWNED: no spawn_agent answered}"


def with_spawned(obj, thread):
    if isinstance(obj, str):
        return obj.replace("{SPAWNED}", thread)
    if isinstance(obj, list):
        return [with_spawned(x, thread) for x in obj]
    if isinstance(obj, dict):
        return {k: with_spawned(v, thread) for k, v in obj.items()}
    return obj


def anthropic_step(body):
    msgs = body.get("messages") or []
    if not body.get("tools"):
        return {"text": "Sim summary."}
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].get("role") == "user":
            m = MARKER.search(text_of(msgs[i].get("content")))
            if m:
                n = sum(1 for x in msgs[i + 1:] if x.get("role") == "assistant")
                return step_of(m.group(1), n)
    return {"text": "No script."}


def responses_step(body):
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    if not body.get("tools"):
        return {"text": "Sim summary."}, 0
    for i in range(len(items) - 1, -1, -1):
        it = items[i]
        if isinstance(it, dict) and it.get("role") == "user" and it.get("type", "message") == "message":
            m = MARKER.search(text_of(it.get("content")))
            if not m:
                continue
            steps = [int(s.group(1)) for later in items[i + 1:] if isinstance(later, dict)
                     and later.get("type") in ("function_call", "custom_tool_call")
                     for s in [STEP_ID.search(later.get("call_id") or "")] if s]
            said = sum(1 for later in items[i + 1:] if isinstance(later, dict)
                       and later.get("type") == "message" and later.get("role") == "assistant")
            n = max(steps) + 1 if steps else said
            step = step_of(m.group(1), n)
            if "{SPAWNED}" in json.dumps(step):
                step = with_spawned(step, spawned(items))
            return step, n
    return {"text": "No script."}, 0


def pieces(s, n=40):
    return [s[i:i + n] for i in range(0, len(s), n)] or [""]


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

    def sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def event(self, name, obj):
        self.wfile.write(b"event: " + name.encode() + b"\ndata: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()

    def do_GET(self):
        self.reply(404, {"error": {"message": "not found"}})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return self.reply(400, {"error": {"message": "bad json"}})
        path = self.path.split("?")[0]
        try:
            if path.endswith("/messages/count_tokens"):
                return self.reply(200, {"input_tokens": n // 4})
            if path.endswith("/messages"):
                return self.messages(body)
            if path.endswith("/responses"):
                return self.openai_responses(body)
            return self.reply(404, {"error": {"message": "not found: " + path}})
        except (BrokenPipeError, ConnectionResetError):
            pass

    def messages(self, body):
        step = anthropic_step(body)
        if step.get("delay"):
            time.sleep(float(step["delay"]))
        calls = calls_of(step)
        blocks = [] if calls else [{"type": "text", "text": step.get("text", "")}]
        for name, args, _ in calls:
            blocks.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:16]}", "name": name, "input": args})
        stop = "tool_use" if calls else "end_turn"
        mid = "msg_sim" + uuid.uuid4().hex[:16]
        usage = {"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        self.sse()
        self.event("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": body.get("model", "claude-sim"),
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}})
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                self.event("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}})
                for p in pieces(b["text"]):
                    self.event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": p}})
            else:
                self.event("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                    "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                for p in pieces(json.dumps(b["input"]), 60):
                    self.event("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "input_json_delta", "partial_json": p}})
            self.event("content_block_stop", {"type": "content_block_stop", "index": i})
        self.event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 20}})
        self.event("message_stop", {"type": "message_stop"})

    def openai_responses(self, body):
        step, n = responses_step(body)
        if step.get("delay"):
            time.sleep(float(step["delay"]))
        custom = {t.get("name") for t in body.get("tools") or [] if t.get("type") == "custom"}
        calls = calls_of(step)
        items = []
        if not calls:
            items.append({"type": "message", "id": f"msg_s{n}_{uuid.uuid4().hex[:8]}", "role": "assistant",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": step.get("text", ""), "annotations": []}]})
        for j, (name, args, namespace) in enumerate(calls):
            cid = f"call_s{n}_{j}_{uuid.uuid4().hex[:8]}"
            if namespace:
                items.append({"type": "function_call", "id": f"fc_s{n}_{j}", "status": "completed",
                              "call_id": cid, "name": name, "namespace": namespace,
                              "arguments": json.dumps(args)})
            elif name in custom:
                items.append({"type": "custom_tool_call", "id": f"ctc_s{n}_{j}", "status": "completed",
                              "call_id": cid, "name": name, "input": args if isinstance(args, str) else ""})
            else:
                items.append({"type": "function_call", "id": f"fc_s{n}_{j}", "status": "completed",
                              "call_id": cid, "name": name, "arguments": json.dumps(args)})
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 120}
        resp = {"id": "resp_sim" + uuid.uuid4().hex[:16], "object": "response", "created_at": int(time.time()),
                "status": "completed", "model": body.get("model", "gpt-sim"), "output": items, "usage": usage}
        self.sse()
        self.event("response.created", {"type": "response.created",
                                         "response": {**resp, "status": "in_progress", "output": []}})
        for j, it in enumerate(items):
            self.event("response.output_item.added", {"type": "response.output_item.added", "output_index": j,
                                                      "item": it})
            if it["type"] == "message":
                for p in pieces(it["content"][0]["text"]):
                    self.event("response.output_text.delta", {"type": "response.output_text.delta",
                                                              "item_id": it["id"], "output_index": j,
                                                              "content_index": 0, "delta": p})
            self.event("response.output_item.done", {"type": "response.output_item.done", "output_index": j,
                                                     "item": it})
        self.event("response.completed", {"type": "response.completed", "response": resp})


def main():
    global SCRIPT_DIR, ROOT
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", required=True)
    p.add_argument("--root")
    a = p.parse_args()
    SCRIPT_DIR = os.path.join(os.path.dirname(os.path.abspath(a.port_file)), "scripts")
    ROOT = a.root
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
