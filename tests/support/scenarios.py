#!/usr/bin/env python3
"""Scenario scripts for the scripted fake model, and the throwaway project they work in.

Each script is a list of model steps (see fake_model.py). A session runs one when its prompt
contains `SCRIPT:<name>`; a subagent runs one when the parent's `task` prompt contains it.
The same scripts drive the integration tests and regenerate the labelled fixtures
(fixtures/regenerate), so a fixture session is always a real opencode session.

    python3 scenarios.py make-project DIR     # the project: git repo with src/, docs/, tools/
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes  # noqa: E402

NAV = "{ROOT}/src/navbar.js"
STATS = "{ROOT}/tools/stats.py"
SPEC = "{ROOT}/docs/spec.md"
DISPATCH = "{ROOT}/src/dispatcher.py"


def t(tool, **args):
    return {"tool": tool, "args": args}


def task(child, agent, description):
    return t("task", description=description, subagent_type=agent,
             prompt=f"SCRIPT:{child} {description}.")


def edit(path, old, new):
    return t("edit", filePath=path, oldString=old, newString=new)


SCRIPTS = {}

# ---- readers (issue: opencode readers) -------------------------------------------------------

SCRIPTS["reread"] = [t("read", filePath=SPEC) for _ in range(8)] + [{"text": "Still reading."}]

# the new user's loop (issue #11): the same file read 40 times, slowly enough that a watchdog tick
# lands while `opencode run` (or a serve) is still at it
SCRIPTS["slow_reread40"] = [dict(t("read", filePath=SPEC), delay=0.5) for _ in range(40)] + [
    {"text": "Still reading."}]

TODOS = [{"content": "Fix navItem1", "status": "in_progress", "priority": "high"},
         {"content": "Add footer", "status": "pending", "priority": "medium"}]
SCRIPTS["healthy"] = [
    t("todowrite", todos=TODOS),
    t("glob", pattern="**/*.js"),
    t("grep", pattern="function navItem1\\b", include="*.js"),
    t("read", filePath=NAV, offset=1, limit=20),
    edit(NAV, "  el.textContent = label + ' #1';\n  el.href = href;\n}",
         "  el.textContent = label + ' #1';\n  el.href = href;\n  return el;\n}"),
    t("write", filePath="{ROOT}/src/footer.js",
      content="// footer.js\nfunction footer(t) {\n  return t;\n}\nmodule.exports = { footer };\n"),
    t("bash", command="python3 tools/stats.py", timeout=60000),
    t("bash", command="git add -A && git commit -q -m 'Fix navItem1; add footer'"),
    t("todowrite", todos=[dict(x, status="completed") for x in TODOS]),
    {"text": "Fixed navItem1, added a footer, committed."},
]

SCRIPTS["failing_bash"] = [
    t("bash", command="python3 -c 'import sys; sys.exit(3)'"),
    t("bash", command="ls /nonexistent-dir"),
    t("bash", command="sleep 5", timeout=1000),
    t("read", filePath="{ROOT}/src/missing.js"),
    {"text": "Those failed."},
]

SCRIPTS["abort"] = [t("bash", command="echo started; sleep 30; echo never"), {"text": "unreachable"}]

SCRIPTS["bash_edit"] = [
    t("bash", command="sed -i 's/stats helper/statistics helper/' README.md"),
    t("bash", command="cat README.md | head -3"),
    {"text": "Edited the README with sed."},
]

SCRIPTS["secrets"] = [
    t("bash", command="API_TOKEN=abc123secret curl -s -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9' "
                      "http://127.0.0.1:9/x || true"),
    t("write", filePath="{ROOT}/notes.txt", content="private note: the launch code is 0000\n"),
    {"text": "Done."},
]

SCRIPTS["parent"] = [
    {"tools": [task("child_explore", "explore", "Find the navItem functions"),
               task("child_loop", "general", "Check stats for division by zero")]},
    {"text": "Both subagents reported back."},
]
SCRIPTS["child_explore"] = [
    t("glob", pattern="**/*.js"),
    t("grep", pattern="function navItem", include="*.js"),
    t("read", filePath=NAV, offset=1, limit=12),
    {"text": "navItem functions are in src/navbar.js."},
]
SCRIPTS["child_loop"] = [t("grep", pattern="len\\(xs\\)", path="{ROOT}/tools") for _ in range(10)] + [
    {"text": "mean() divides by len(xs)."}]

# ---- liveness ---------------------------------------------------------------------------------

# the provider stops answering mid-stream (the driver aborts it when done looking)
SCRIPTS["hang"] = [t("read", filePath=SPEC), dict(t("read", filePath=SPEC), hang=120), {"text": "never"}]
# the provider answers 503 four times before it succeeds
SCRIPTS["retry503"] = [dict(t("read", filePath=SPEC), fail_first=4, fail_status=503), {"text": "Read it."}]
# the provider answers 503 twice, then its third answer stops mid-stream: retrying, then stalled
SCRIPTS["retry_then_hang"] = [t("read", filePath=SPEC),
                              dict(t("read", filePath=SPEC), fail_first=2, fail_status=503, hang=120),
                              {"text": "never"}]
# a bash call that the "asker" agent must get permission for; nobody answers
SCRIPTS["ask_bash"] = [t("bash", command="ls"), {"text": "Listed."}]
# the question tool (allowed only where a test's config allows it): nobody answers at first
SCRIPTS["ask_question"] = [t("question", questions=[{
    "question": "Which database should the report use?", "header": "Database",
    "options": [{"label": "SQLite", "description": "a file"},
                {"label": "Postgres", "description": "a server"}]}]), {"text": "Noted."}]
# stops while its own todo list still has open items
SCRIPTS["todo_stop"] = [t("todowrite", todos=[
    {"content": "Read the spec", "status": "completed", "priority": "high"},
    {"content": "Write the summary", "status": "in_progress", "priority": "high"},
    {"content": "Commit", "status": "pending", "priority": "low"}]),
    {"text": "I will stop here for now."}]

# ---- alert lifecycle (issue: alert lifecycle v2) -------------------------------------------

# a loop that goes on: one read of the spec every half second, for about half a minute
SCRIPTS["lc_goes_on"] = [dict(t("read", filePath=SPEC), delay=0.5) for _ in range(50)] + [{"text": "Still reading."}]
# the operator's journey: a loop long enough to trigger, escalate and be stopped by Ctrl-C
SCRIPTS["lc_journey"] = [dict(t("read", filePath=SPEC), delay=0.5) for _ in range(200)] + [{"text": "Still reading."}]
# a loop on a failing check, then (a later prompt) the fix that lands and the check that passes
SCRIPTS["lc_fixed_loop"] = [t("bash", command="python3 tools/check.py") for _ in range(13)] + [
    {"text": "check.py keeps failing."}]
SCRIPTS["lc_fix"] = [
    t("read", filePath="{ROOT}/tools/check.py"),
    edit("{ROOT}/tools/check.py", "sys.exit(1)", "sys.exit(0)"),
    t("bash", command="python3 tools/check.py"),
    t("bash", command="git add -A && git commit -q -m 'check passes'"),
    {"text": "Fixed: check.py passes."}]
# a loop, then a long tool well within its declared timeout
SCRIPTS["lc_long_tool"] = [t("read", filePath=SPEC) for _ in range(9)] + [
    t("bash", command="sleep 25", timeout=120000), {"text": "Slept."}]
# a loop whose model then streams one chunk and says nothing more: the reply stays open
SCRIPTS["lc_hang_loop"] = [t("read", filePath=SPEC) for _ in range(10)] + [
    dict(t("read", filePath=SPEC), hang=120), {"text": "never"}]

# ---- the stop policy (issue 28) --------------------------------------------------------------
# as lc_hang_loop, with calls paced so that the policy's test sees some made after its first tick
# however long that tick took (all ten came before it once, under load: nothing after the trigger)
SCRIPTS["st_hang_loop"] = [dict(t("read", filePath=SPEC), delay=0.3) for _ in range(20)] + [
    dict(t("read", filePath=SPEC), hang=120), {"text": "never"}]
# a loop that lands a change after its trigger and then loops on: the policy never stops it
SCRIPTS["st_landed_loop"] = [dict(t("read", filePath=SPEC), delay=0.5) for _ in range(12)] + [
    t("write", filePath="{ROOT}/notes.md", content="# notes\n"),
] + [dict(t("read", filePath=SPEC), delay=0.5) for _ in range(40)] + [{"text": "Still reading."}]

# ---- the labelled fixture (issue: progress-detect) -------------------------------------------
# Shapes of the 15 sessions of the original incident, re-created as real sessions, plus the
# weaknesses found while building the detector. fixtures/regenerate runs them and labels them.

# must flag: a worker that reads navbar.js 61 times (with a few greps and failing edits between)
nav61 = []
for i in range(61):
    nav61.append(t("read", filePath=NAV) if i % 3 else t("read", filePath=NAV, offset=1, limit=120))
    if i % 10 == 9:
        nav61.append(t("grep", pattern="navItem%d\\b" % (i // 10), include="*.js"))
    if i % 20 == 19:
        nav61.append(edit(NAV, "const navbar = createNavbar();", "const navbar = createNavbar({ sticky: 1 });"))
SCRIPTS["fx_navbar61"] = nav61 + [{"text": "Still looking for the navbar bug."}]

# must flag: first attempt A, a failing-edit/read/test cycle
SCRIPTS["fx_first_attempt_a"] = [s for i in range(15) for s in (
    t("read", filePath=STATS),
    edit(STATS, "    return sum(xs) / len(xs)\n    # guard", "    if not xs:\n        return 0\n"),
    t("bash", command="python3 -c 'import tools.stats as s; s.mean([])'"),
)] + [{"text": "mean([]) still fails."}]

# must flag: first attempt B, a different loop (search, search, read)
SCRIPTS["fx_first_attempt_b"] = [s for i in range(14) for s in (
    t("grep", pattern="def mean", path="{ROOT}/tools"),
    t("glob", pattern="tools/*.py"),
    t("read", filePath=STATS, offset=1, limit=10),
)] + [{"text": "Cannot find where mean is called."}]

# must flag: a worker looping on a failing command
SCRIPTS["fx_failing_command"] = [s for i in range(20) for s in (
    t("bash", command="cd {ROOT} && python3 tools/check.py --strict"),
    t("read", filePath="{ROOT}/tools/check.py"),
)] + [{"text": "check.py keeps failing."}]

# must flag: an explore helper re-reading a file that was deleted
SCRIPTS["fx_explore_deleted_parent"] = [task("fx_explore_deleted", "explore", "Summarise the old API doc"),
                                        {"text": "The explorer returned."}]
SCRIPTS["fx_explore_deleted"] = [s for i in range(12) for s in (
    t("read", filePath="{ROOT}/docs/old_api.md"),
    t("glob", pattern="docs/*old*"),
)] + [{"text": "docs/old_api.md cannot be read."}]

# must flag: a helper that prints the same spec 12 times (a short session)
SCRIPTS["fx_spec_printer_parent"] = [task("fx_spec_printer", "general", "Print the spec for review"),
                                     {"text": "The helper returned."}]
SCRIPTS["fx_spec_printer"] = [t("bash", command="cat docs/spec.md") for _ in range(12)] + [
    {"text": "Printed the spec."}]

# must flag after the healthy stretch: a long "Atlas" orchestrator
atlas = []
for i in range(1, 31):
    atlas += [t("read", filePath=NAV, offset=5 * i - 4, limit=5),
              edit(NAV, f"  el.textContent = label + ' #{i}';\n  el.href = href;\n}}",
                   f"  el.textContent = label + ' #{i}';\n  el.href = href;\n  return el;\n}}")]
    if i % 10 == 0:
        atlas += [t("bash", command=f"git add -A && git commit -q -m 'navItems up to {i} return el'")]
SCRIPTS["fx_atlas"] = atlas  # part 1: works well (63 calls); part 2 is fx_atlas_loop
SCRIPTS["fx_atlas_loop"] = [s for i in range(30) for s in (
    t("read", filePath=NAV, offset=151, limit=40),
    t("bash", command="node -e \"require('./src/navbar.js').navItem31('a','b').href\""),
    t("grep", pattern="navItem31", include="*.js"),
)] + [{"text": "navItem31 still returns undefined."}]

# must flag: a planner re-reading the spec through shifting offsets (68x its length overall)
planner = []
for i in range(136):  # never the same (offset, limit) twice within 60 calls; ~68x the spec overall
    planner.append(t("read", filePath=SPEC, offset=1 + (i * 7) % 26, limit=24 + i % 3))
SCRIPTS["fx_planner_spec68"] = planner + [{"text": "Still planning."}]

# must not flag: a retry of a worker that succeeds
SCRIPTS["fx_retry_ok"] = [
    dict(t("read", filePath=STATS), fail_first=2, fail_status=503),
    t("bash", command="python3 -c 'import tools.stats as s; s.mean([])'"),
    edit(STATS, "def mean(xs):\n    return sum(xs) / len(xs)",
         "def mean(xs):\n    if not xs:\n        return 0.0\n    return sum(xs) / len(xs)"),
    t("bash", command="python3 -c 'import tools.stats as s; print(s.mean([]))'"),
    t("read", filePath=STATS, offset=1, limit=8),
    edit(STATS, "def median(xs):\n    s = sorted(xs)",
         "def median(xs):\n    if not xs:\n        return 0.0\n    s = sorted(xs)"),
    t("bash", command="python3 -c 'import tools.stats as s; print(s.median([]))'"),
    t("bash", command="python3 tools/stats.py"),
    t("bash", command="git add -A && git commit -q -m 'stats: empty input returns 0'"),
    {"text": "mean and median handle empty input; committed."},
]

# must not flag: a worker that compacts its context and goes on (two prompts, summarize between)
SCRIPTS["fx_compact_1"] = [t("read", filePath=NAV, offset=1 + 20 * i, limit=20) for i in range(10)] + [
    edit(NAV, "// navbar.js - simulated navbar component", "// navbar.js - navbar component"),
    {"text": "Read the first part of navbar.js and fixed the header."}]
SCRIPTS["fx_compact_2"] = [t("read", filePath=NAV, offset=1 + 20 * i, limit=20) for i in range(4)] + [
    s for i in range(2, 8) for s in (
        edit(NAV, f"  el.textContent = label + ' #{i}';\n  el.href = href;\n}}",
             f"  el.textContent = label + ' #{i}';\n  el.href = href;\n  return el;\n}}"),
        t("read", filePath=NAV, offset=5 * i - 4, limit=6))] + [
    t("bash", command="git add -A && git commit -q -m 'navItems 2-7 return el'"),
    {"text": "Continued after compaction; committed."}]

# must not flag: two healthy workers
h1 = [t("glob", pattern="src/*.js"), t("read", filePath=NAV, offset=1, limit=60)]
for i in range(32, 46):
    h1 += [edit(NAV, f"  el.textContent = label + ' #{i}';\n  el.href = href;\n}}",
                f"  el.textContent = label + ' #{i}';\n  el.href = href;\n  return el;\n}}"),
           t("bash", command="node -e \"require('./src/navbar.js')\"")]
    if i % 4 == 0:
        h1.append(t("read", filePath=NAV, offset=5 * i - 10, limit=20))
h1 += [t("bash", command="git add -A && git commit -q -m 'navItems 32-45 return el'"), {"text": "Done."}]
SCRIPTS["fx_healthy_a"] = h1
SCRIPTS["fx_healthy_b"] = [
    t("read", filePath="{ROOT}/README.md"),
    t("grep", pattern="def ", path="{ROOT}/tools"),
    t("write", filePath="{ROOT}/tools/test_stats.py",
      content="import stats\n\n\ndef test_mean():\n    assert stats.mean([1, 2, 3]) == 2\n"),
    t("bash", command="cd tools && python3 -c 'import test_stats; test_stats.test_mean()'"),
    edit("{ROOT}/tools/test_stats.py", "def test_mean():",
         "def test_median():\n    assert stats.median([3, 1, 2]) == 2\n\n\ndef test_mean():"),
    t("bash", command="cd tools && python3 -c 'import test_stats; test_stats.test_median()'"),
    edit("{ROOT}/README.md", "- tools/stats.py: stats helper", "- tools/stats.py: stats helper (tested)"),
    t("bash", command="git add -A && git commit -q -m 'tests for stats'"),
    {"text": "Added tests."},
]

# must not flag: an explore agent doing sliced reads of one large file
SCRIPTS["fx_explore_sliced_parent"] = [task("fx_explore_sliced", "explore", "Map the dispatcher"),
                                       {"text": "The explorer returned."}]
SCRIPTS["fx_explore_sliced"] = [t("grep", pattern="^def ", path="{ROOT}/src")] + [
    t("read", filePath=DISPATCH, offset=1 + 50 * i, limit=50) for i in range(40)] + [
    t("grep", pattern="route_", include="*.py"), {"text": "The dispatcher has 200 handlers."}]

# must not flag: another explore agent
SCRIPTS["fx_explore_other_parent"] = [task("fx_explore_other", "explore", "Survey the project"),
                                      {"text": "The explorer returned."}]
SCRIPTS["fx_explore_other"] = [
    t("glob", pattern="**/*"), t("read", filePath="{ROOT}/README.md"), t("glob", pattern="src/*"),
    t("read", filePath=NAV, offset=1, limit=40), t("grep", pattern="module.exports", include="*.js"),
    t("read", filePath=STATS), t("grep", pattern="def ", path="{ROOT}/tools"),
    t("read", filePath=SPEC, offset=1, limit=30), t("read", filePath=SPEC, offset=31, limit=30),
    t("read", filePath=DISPATCH, offset=1, limit=80), t("grep", pattern="TODO"),
    t("read", filePath=NAV, offset=280, limit=21),
    {"text": "Surveyed the project."}]

# must not flag: a planner that reads widely and writes its plan
plan = [t("read", filePath=SPEC), t("glob", pattern="**/*.py"), t("glob", pattern="**/*.js")]
plan += [t("read", filePath=DISPATCH, offset=1 + 100 * i, limit=100) for i in range(8)]
plan += [t("read", filePath=NAV, offset=1 + 60 * i, limit=60) for i in range(5)]
plan += [t("grep", pattern=p) for p in ("createElement", "def route_", "sticky", "TODO")]
plan += [t("read", filePath=SPEC, offset=20, limit=20), t("read", filePath=STATS),
         t("write", filePath="{ROOT}/docs/plan.md",
           content="# Plan\n\n1. Fix navItems.\n2. Add routing tests.\n3. Document the spec gaps.\n"),
         {"text": "Wrote docs/plan.md."}]
SCRIPTS["fx_planner_writes"] = plan

# weakness: edits that undo each other land nothing (must flag)
A, B = "// navbar.js - simulated navbar component", "// navbar.js - simulated navbar component (sticky)"
SCRIPTS["fx_flipflop"] = [s for _ in range(9) for s in (edit(NAV, A, B), t("read", filePath=NAV, offset=1, limit=5),
                                                         edit(NAV, B, A))] + [
    {"text": "Still undecided about the header comment."}]

# weakness: a short loop, one call 14 times in 16 calls (must flag)
SCRIPTS["fx_short_loop"] = [t("glob", pattern="src/*.js"), t("read", filePath=NAV, offset=1, limit=20)] + [
    t("bash", command="python3 tools/check.py") for _ in range(14)] + [{"text": "check.py fails."}]

# weakness: a short healthy session that re-reads one file a few times (must not flag)
SCRIPTS["fx_short_healthy"] = [
    t("read", filePath=STATS), t("bash", command="python3 tools/stats.py"), t("read", filePath=STATS),
    edit(STATS, "if __name__ == \"__main__\":", "if __name__ == \"__main__\":  # demo"),
    t("read", filePath=STATS), t("bash", command="python3 tools/stats.py"),
    t("bash", command="git add -A && git commit -q -m 'stats demo comment'"), {"text": "Done."}]


# ---- detector v2 (issue 12): the shapes the seed rules missed ---------------------------------

# must flag, within 15 calls of the loop's start and never before it: a worker lands a dozen edits
# and a commit over 45 calls, then cycles reads and greps of one file with no edit
work = []
for i in range(46, 58):
    work += [t("read", filePath=NAV, offset=5 * i - 4, limit=5),
             edit(NAV, f"  el.textContent = label + ' #{i}';\n  el.href = href;\n}}",
                  f"  el.textContent = label + ' #{i}';\n  el.href = href;\n  return el;\n}}"),
             t("bash", command="node -e \"require('./src/navbar.js')\"")]
    if i % 3 == 0:
        work.append(t("grep", pattern=f"navItem{i}\\b", include="*.js"))
work.append(t("bash", command="git add -A && git commit -q -m 'navItems 46-57 return el'"))
SCRIPTS["fx_work_then_loop"] = work + [s for _ in range(10) for s in (
    t("read", filePath=NAV, offset=281, limit=20),
    t("grep", pattern="module.exports", path="{ROOT}/src"),
    t("read", filePath=NAV, offset=1, limit=10),
    t("grep", pattern="navItem58\\b", path="{ROOT}/src"),
)] + [{"text": "navItem58 is still not exported the way I expect."}]

# must flag by the 6th call: the same file read six times in a row, nothing else
SCRIPTS["fx_identical_run"] = [t("read", filePath="{ROOT}/README.md") for _ in range(6)] + [
    {"text": "Read the README."}]

# must flag by the 6th round: edits land (a comment each time), the same check fails the same way
SCRIPTS["fx_edit_same_failure"] = [t("read", filePath="{ROOT}/tools/check.py")] + [s for r in range(1, 8) for s in (
    edit("{ROOT}/tools/check.py", "import sys" + ("  # try %d" % (r - 1) if r > 1 else ""),
         "import sys  # try %d" % r),
    t("bash", command="python3 tools/check.py"),
)] + [{"text": "check.py still finds 3 problems."}]

# must not flag: test-driven work whose check output changes every round and ends passing
CALC = "{ROOT}/tools/calc.py"
SCRIPTS["fx_tdd_passes"] = [
    t("write", filePath=CALC, content="def add(a, b):\n    return None\n\n\ndef sub(a, b):\n    return None\n\n\n"
                                      "def mul(a, b):\n    return None\n\n\ndef div(a, b):\n    return None\n"),
    t("write", filePath="{ROOT}/tools/test_calc.py", content=(
        "import sys\nimport calc\n\ncases = [('add', calc.add(2, 3), 5), ('sub', calc.sub(5, 3), 2),\n"
        "         ('mul', calc.mul(2, 3), 6), ('div', calc.div(6, 3), 2)]\n"
        "bad = [n for n, got, want in cases if got != want]\n"
        "print('failing:', ' '.join(bad) if bad else 'none')\nsys.exit(1 if bad else 0)\n")),
    t("bash", command="cd tools && python3 test_calc.py"),
] + [s for name, op in (("add", "a + b"), ("sub", "a - b"), ("mul", "a * b"), ("div", "a / b")) for s in (
    t("read", filePath=CALC),
    edit(CALC, f"def {name}(a, b):\n    return None", f"def {name}(a, b):\n    return {op}"),
    t("bash", command="cd tools && python3 test_calc.py"),
)] + [t("bash", command="git add -A && git commit -q -m 'calc: four operations, tested'"),
      {"text": "All four operations pass their tests."}]

# must flag on the third full pass: one 300-line file paged through shifting windows three times
# (7 + 6 + 8 reads), nothing edited
GUIDE = "{ROOT}/docs/guide.md"
SCRIPTS["fx_circling"] = (
    [t("read", filePath=GUIDE, offset=1 + 43 * i, limit=43) for i in range(7)]
    + [t("read", filePath=GUIDE, offset=1 + 50 * i, limit=50) for i in range(6)]
    + [t("read", filePath=GUIDE, offset=1 + 40 * i, limit=40) for i in range(8)]
    + [{"text": "Read the guide three times over."}])

# issue 26: the loop shapes of other agents' real runs, and two hard negatives (shapes.py)
SCRIPTS.update(shapes.SCRIPTS)


# ---- the project ------------------------------------------------------------------------------

def make_project(proj):
    os.makedirs(f"{proj}/src", exist_ok=True)
    os.makedirs(f"{proj}/tools", exist_ok=True)
    os.makedirs(f"{proj}/docs", exist_ok=True)
    lines = ["// navbar.js - simulated navbar component", "'use strict';", ""]
    for i in range(1, 60):
        lines += [f"function navItem{i}(label, href) {{", "  const el = document.createElement('a');",
                  f"  el.textContent = label + ' #{i}';", "  el.href = href;", "}"]
    lines += ["", "module.exports = { " + ", ".join(f"navItem{i}" for i in range(1, 60)) + " };"]
    while len(lines) < 300:
        lines.append(f"// filler line {len(lines) + 1}")
    open(f"{proj}/src/navbar.js", "w").write("\n".join(lines[:300]) + "\n")
    open(f"{proj}/README.md", "w").write(
        "# Sim project\n\nA tiny project for scripted opencode sessions.\n\n"
        "- src/navbar.js: navbar component\n- tools/stats.py: stats helper\n")
    open(f"{proj}/tools/stats.py", "w").write(
        "def mean(xs):\n    return sum(xs) / len(xs)\n\n\ndef median(xs):\n    s = sorted(xs)\n    n = len(s)\n"
        "    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n\n\n"
        "if __name__ == \"__main__\":\n    print(mean([1, 2, 3]), median([3, 1, 2]))\n")
    open(f"{proj}/tools/check.py", "w").write(
        "import sys\n\nprint('check: 3 problems found')\nsys.exit(1)\n")
    spec = ["# Navbar spec", ""] + [f"{i}. The navbar requirement number {i} holds." for i in range(1, 49)]
    open(f"{proj}/docs/spec.md", "w").write("\n".join(spec) + "\n")
    open(f"{proj}/docs/old_api.md", "w").write("# Old API\n\nGone soon.\n")
    # 300 lines that no scenario edits, for the circling session
    guide = ["# Guide", ""] + [f"Guide line {i}: how the navbar is meant to be used." for i in range(3, 301)]
    open(f"{proj}/docs/guide.md", "w").write("\n".join(guide) + "\n")
    disp = ["# dispatcher.py - routes requests", ""]
    for i in range(200):
        disp += [f"def route_{i}(req):", f"    \"\"\"Handle route {i}.\"\"\"", f"    return handle(req, {i})",
                 "", "", "", "", "", "", ""]
    open(f"{proj}/src/dispatcher.py", "w").write("\n".join(disp[:2000]) + "\n")
    shapes.make_files(proj)
    g = ["git", "-C", proj]
    subprocess.run(["git", "init", "-q", proj], check=True)
    subprocess.run(g + ["config", "user.email", "sim@example.com"], check=True)
    subprocess.run(g + ["config", "user.name", "Sim"], check=True)
    subprocess.run(g + ["config", "commit.gpgsign", "false"], check=True)
    subprocess.run(g + ["add", "-A"], check=True)
    subprocess.run(g + ["commit", "-q", "-m", "initial"], check=True)
    # the explore helper of the fixture re-reads a file that no longer exists
    os.remove(f"{proj}/docs/old_api.md")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make-project":
        make_project(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "list":
        print(json.dumps(sorted(SCRIPTS)))
    else:
        sys.exit("usage: scenarios.py make-project DIR | list")
