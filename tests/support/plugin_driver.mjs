// Drives deploy/oc-watchdog-stop.js outside opencode, for the tests: loads it with a stand-in SDK
// client (session.abort records the id, answers true, or throws for ids starting "ses_throw"),
// then runs one operation per stdin line and answers one JSON line per operation:
//   {"op":"call","session":S,"call":C}  -> {"ran":true} or {"refused":"<message>"}
//   {"op":"busy","session":S}           -> {} (a session.status busy event)
//   {"op":"wait","ms":N}                -> {"aborted":[ids so far]}
//   {"op":"logs"}                       -> {"logs":[messages given to client.app.log so far]}
import readline from "node:readline"

const plugin = await import(process.argv[2])
const aborted = []
const logs = []
const client = {
  app: {
    log: async ({ body }) => {
      logs.push(body.service + " " + body.level + ": " + body.message)
      return { data: true }
    },
  },
  session: {
    abort: async ({ path }) => {
      if (path.id.startsWith("ses_throw")) throw new Error("no such session")
      aborted.push(path.id)
      return { data: true }
    },
  },
}
const hooks = await Object.values(plugin)[0]({ client, directory: process.cwd() })
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n")
say({ ready: true, pid: process.pid, exports: Object.keys(plugin) })
for await (const line of readline.createInterface({ input: process.stdin })) {
  const op = JSON.parse(line)
  if (op.op === "call") {
    try {
      await hooks["tool.execute.before"]({ tool: "read", sessionID: op.session, callID: op.call }, { args: {} })
      say({ ran: true })
    } catch (e) {
      say({ refused: e.message })
    }
  } else if (op.op === "busy") {
    await hooks.event({ event: { type: "session.status", properties: { sessionID: op.session, status: { type: "busy" } } } })
    say({})
  } else if (op.op === "wait") {
    await new Promise((r) => setTimeout(r, op.ms))
    say({ aborted })
  } else if (op.op === "logs") {
    say({ logs })
  }
}
process.exit(0)
