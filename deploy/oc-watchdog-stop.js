// oc-watchdog-stop: lets `wd-store stop SESSION` stop a TUI or `opencode run` session, which
// listen on no port. opencode loads it from ~/.config/opencode/plugin/ (deploy/install
// --with-stop-plugin puts it there) into every opencode process.
//
// The watchdog writes a request, $XDG_STATE_HOME/oc-watchdog/stop/<session>.json
// ({id, session, episode, expires}). The process that runs that session (it has seen it busy)
// aborts it once per request id, the way Esc does, and refuses the session's next tool call
// if one comes first. It then writes <session>.ack.json: what it did, when, in which process.
// Nothing else: no network, no dependency. It fails open: without the watchdog's state
// directory, with a file it cannot parse, an expired request, or any error, it does nothing.
//
// It runs inside the agent, so nothing it reads may hold or grow opencode: a request is only a
// regular file of this user's, at most 64 KiB, in a directory of this user's that nobody else
// can write to, opened without following a link and without waiting (a FIFO, /dev/zero behind
// a link, a 100 MB file, another user's file or directory are each "no request", said once in
// opencode's log). What it writes goes to a fresh file of a random name (created exclusively,
// 0600), then renamed into place, so no link planted at a predictable name is written through.
import crypto from "node:crypto"
import fs from "node:fs"
import os from "node:os"
import path from "node:path"

const VERSION = 1
const REFUSAL = "Stopped by the watchdog at the operator's request. Do not retry; wait for the user."
const MAX_BYTES = 64 * 1024
const xdg = process.env.XDG_STATE_HOME
const state = path.join(xdg && path.isAbsolute(xdg) ? xdg : path.join(os.homedir(), ".local/state"), "oc-watchdog")
const dir = path.join(state, "stop")
const uid = process.getuid?.() ?? -1
const { O_RDONLY, O_NOFOLLOW = 0, O_NONBLOCK = 0 } = fs.constants

// an `opencode run` (the first word after the program that is not an option, as oc-sessions
// reads it) shows its output in a terminal or a script's log, where its own words after a stop
// are "Error: Aborted" or nothing: the plugin says there who stopped it. A TUI's stderr is its
// screen, which is never written to.
const isRun = (() => {
  try {
    const a = fs.readFileSync("/proc/self/cmdline", "latin1").split("\0").slice(1)
    const takesValue = ["--log-level", "--port", "--hostname", "--mdns-domain", "--cors", "-m", "--model", "-s",
      "--session", "--prompt", "--agent", "--replay-limit"]
    let i = 0
    while (i < a.length && a[i].startsWith("-")) i += takesValue.includes(a[i]) ? 2 : 1
    return a[i] === "run"
  } catch {
    return false
  }
})()

// each surprise once per process, path and reason, into opencode's log (never on stderr, which
// is the TUI's screen), never thrown
const said = new Set()
let log = null
function surprise(what, why) {
  const key = what + "\0" + why
  if (said.has(key) || said.size > 100) return
  said.add(key)
  try {
    log?.({ body: { service: "oc-watchdog-stop", level: "warn", message: what + ": " + why + "; taken as no stop request" } })
      ?.catch?.(() => {})
  } catch {}
}

// a directory of this user's that nobody else can write to, not a link
function ownDir(d) {
  let st
  try {
    st = fs.lstatSync(d)
  } catch {
    return false
  }
  if (!st.isDirectory()) return surprise(d, "not a directory"), false
  if (st.uid !== uid) return surprise(d, "owned by uid " + st.uid + ", not by this user"), false
  if (st.mode & 0o022) return surprise(d, "writable by others (mode " + (st.mode & 0o777).toString(8) + ")"), false
  return true
}

// the text of a regular file of this user's of at most MAX_BYTES, or null; never blocks
function readOwn(file) {
  let st
  try {
    st = fs.lstatSync(file)
  } catch {
    return null // no request: the usual case
  }
  if (!st.isFile()) return surprise(file, "not a regular file"), null
  if (st.uid !== uid) return surprise(file, "owned by uid " + st.uid + ", not by this user"), null
  if (st.size > MAX_BYTES) return surprise(file, st.size + " bytes, more than " + MAX_BYTES), null
  let fd = -1
  try {
    fd = fs.openSync(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
    // what was opened is what was looked at (not swapped for a FIFO or a device meanwhile)
    const at = fs.fstatSync(fd)
    if (!at.isFile() || at.uid !== uid || at.ino !== st.ino || at.dev !== st.dev)
      return surprise(file, "changed while it was opened"), null
    const buf = Buffer.alloc(MAX_BYTES + 1)
    let n = 0
    for (let k; n < buf.length && (k = fs.readSync(fd, buf, n, buf.length - n, null)) > 0; ) n += k
    if (n > MAX_BYTES) return surprise(file, "grew past " + MAX_BYTES + " bytes"), null
    return buf.toString("utf8", 0, n)
  } catch (e) {
    return surprise(file, String(e?.code ?? e?.message ?? e)), null
  } finally {
    if (fd >= 0) try { fs.closeSync(fd) } catch {}
  }
}

// the live request for a session, or null (none, unreadable, expired, already acted on)
function request(session, done) {
  try {
    if (!ownDir(state) || !ownDir(dir)) return null
    const text = readOwn(path.join(dir, session + ".json"))
    if (text === null) return null
    const r = JSON.parse(text)
    const good = typeof r.id === "string" && r.session === session && typeof r.expires === "number"
    return good && r.expires > Date.now() && !done.has(r.id) ? r : null
  } catch {
    return null
  }
}

// `obj` as the whole of `file`: a new file of a random name, created exclusively and private,
// renamed into place (a rename replaces a link at `file`, never writes through it)
function write(file, obj) {
  let tmp = null
  try {
    if (!ownDir(path.dirname(file))) return
    tmp = path.join(path.dirname(file), "." + crypto.randomBytes(12).toString("hex") + ".tmp")
    fs.writeFileSync(tmp, JSON.stringify(obj) + "\n", { flag: "wx", mode: 0o600 })
    fs.renameSync(tmp, file)
    tmp = null
  } catch {
  } finally {
    if (tmp) try { fs.unlinkSync(tmp) } catch {}
  }
}

export const OcWatchdogStop = async ({ client }) => {
  try {
    log = client?.app?.log ? (o) => client.app.log(o) : null
  } catch {}
  const done = new Set() // request ids acted on by this process
  const mine = new Set() // sessions this process has run
  const stop = async (r, refused) => {
    done.add(r.id)
    let aborted = false
    let error = null
    try {
      const res = await client.session.abort({ path: { id: r.session } })
      aborted = res?.data === true
      if (!aborted) error = "abort answered " + JSON.stringify(res?.error ?? res?.data ?? null).slice(0, 200)
    } catch (e) {
      error = String(e?.message ?? e).slice(0, 200)
    }
    // the TUI says who stopped it (Esc's "interrupted" alone does not); an `opencode run` says it
    // on its stderr, with how to resume
    if (aborted) {
      const why = (typeof r.why === "string" ? r.why.slice(0, 200) : "The watchdog stopped this session's loop")
        .replace(/[\x00-\x1f\x7f]/g, " ")
      try {
        await client.tui?.showToast?.({ body: { title: "oc-watchdog", variant: "warning", duration: 30000,
          message: why + ". Type a message to resume it." } })
      } catch {}
      if (isRun) {
        try {
          process.stderr.write("\noc-watchdog: " + why + " (session " + r.session + "). Resume it with: opencode run -s " +
            r.session + " \"continue\"\n")
        } catch {}
      }
    }
    write(path.join(dir, r.session + ".ack.json"), {
      id: r.id, session: r.session, pid: process.pid, version: VERSION, t: Date.now(),
      aborted, refused_call: refused, error,
    })
  }
  try {
    if (fs.existsSync(state) && ownDir(state)) {
      fs.mkdirSync(path.join(dir, "loaded"), { recursive: true, mode: 0o700 })
      write(path.join(dir, "loaded", process.pid + ".json"), { pid: process.pid, version: VERSION, t: Date.now() })
    }
  } catch {}
  const timer = setInterval(() => {
    for (const s of mine) {
      const r = request(s, done)
      if (r) stop(r, null).catch(() => {})
    }
  }, 500)
  timer.unref?.()
  return {
    event: async ({ event }) => {
      try {
        if (event.type === "session.status" && event.properties.status.type === "busy") mine.add(event.properties.sessionID)
      } catch {}
    },
    "tool.execute.before": async (input) => {
      let r = null
      try {
        mine.add(input.sessionID)
        r = request(input.sessionID, done)
        if (r) await stop(r, input.callID ?? null)
      } catch {}
      if (r) throw new Error(REFUSAL)
    },
  }
}
