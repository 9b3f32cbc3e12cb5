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
import fs from "node:fs"
import os from "node:os"
import path from "node:path"

const VERSION = 1
const REFUSAL = "Stopped by the watchdog at the operator's request. Do not retry; wait for the user."
const xdg = process.env.XDG_STATE_HOME
const dir = path.join(xdg && path.isAbsolute(xdg) ? xdg : path.join(os.homedir(), ".local/state"),
  "oc-watchdog", "stop")

// the live request for a session, or null (none, unreadable, expired, already acted on)
function request(session, done) {
  try {
    const r = JSON.parse(fs.readFileSync(path.join(dir, session + ".json"), "utf8"))
    const good = typeof r.id === "string" && r.session === session && typeof r.expires === "number"
    return good && r.expires > Date.now() && !done.has(r.id) ? r : null
  } catch {
    return null
  }
}

function write(file, obj) {
  try {
    const tmp = file + "." + process.pid + ".tmp"
    fs.writeFileSync(tmp, JSON.stringify(obj) + "\n")
    fs.renameSync(tmp, file)
  } catch {}
}

export const OcWatchdogStop = async ({ client }) => {
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
    // the TUI says who stopped it (Esc's "interrupted" alone does not); elsewhere nobody shows it
    if (aborted) {
      try {
        await client.tui?.showToast?.({ body: { title: "oc-watchdog", variant: "warning", duration: 30000,
          message: (typeof r.why === "string" ? r.why.slice(0, 200) : "The watchdog stopped this session's loop") +
            ". Type a message to resume it." } })
      } catch {}
    }
    write(path.join(dir, r.session + ".ack.json"), {
      id: r.id, session: r.session, pid: process.pid, version: VERSION, t: Date.now(),
      aborted, refused_call: refused, error,
    })
  }
  try {
    if (fs.existsSync(path.dirname(dir))) {
      fs.mkdirSync(path.join(dir, "loaded"), { recursive: true })
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
