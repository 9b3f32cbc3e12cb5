"""Issue 26's loop shapes (seen in real runs of other agents), re-created as scripts for the scripted
model, and the files of the scenario project they work on. scenarios.py merges SCRIPTS into its own
and calls make_files from make_project; fixtures/regenerate runs them through real opencode and
labels them (tests/integration/fixtures.rs, the `shape_*` entries).

Every file here is one that no other scenario touches, so a session's outputs depend on its own
calls only, whichever scenarios ran before it in the same project.
"""


def t(tool, **args):
    return {"tool": tool, "args": args}


def edit(path, old, new):
    return t("edit", filePath=path, oldString=old, newString=new)


CART = "{ROOT}/src/cart.py"
ROUTES = "{ROOT}/src/routes.py"
SUMMARY = "{ROOT}/tools/summary.py"
REPORT = "{ROOT}/tools/report.py"
BILLING = "{ROOT}/src/billing.py"
RUNBOOK = "{ROOT}/docs/runbook.md"
UNITS = "{ROOT}/tools/units.py"
SPEC = "{ROOT}/docs/spec.md"
GUIDE = "{ROOT}/docs/guide.md"
DISPATCH = "{ROOT}/src/dispatcher.py"

SCRIPTS = {}

# 1. The same landing edit re-sent: one identical edit, 22 times. Its new text keeps the old text, so
# each one lands and appends another copy of the guard; cart.py grows by two lines a call.
GUARD = "def total(items):\n    if not items:\n        return 0"
SCRIPTS["shape_same_landing_edit"] = [t("read", filePath=CART)] + [
    edit(CART, "def total(items):", GUARD) for _ in range(22)] + [
    {"text": "Added the empty-cart guard to total()."}]

# 2. Edit/undo cycles with shifting ranges: 12 rounds of "delete the 12-line ROUTES block, put it back",
# each round anchored on a different span of the surrounding lines, so no two edits are the same and
# every one lands; after each round the file is what it was.
ROUTES_LEAD = ["import re", "from handlers import dispatch", "", "PREFIX = '/api'"]
ROUTES_BLOCK = ["ROUTES = ["] + [f"    ('/item/{i}', 'item_{i}')," for i in range(1, 11)] + ["]"]
ROUTES_TRAIL = ["", "", "def resolve(path):", "    for pattern, name in ROUTES:",
                "        if re.fullmatch(PREFIX + pattern, path):", "            return dispatch(name)",
                "    return None"]


def _routes_round(r):
    lead = "\n".join(ROUTES_LEAD[-(1 + r % 3):])  # 1-3 lines before the block
    trail = "\n".join(ROUTES_TRAIL[:1 + r // 3 + 2])  # 3-6 lines after it
    block = "\n".join(ROUTES_BLOCK)
    return [edit(ROUTES, f"{lead}\n{block}\n{trail}", f"{lead}\n{trail}"),
            edit(ROUTES, f"{lead}\n{trail}", f"{lead}\n{block}\n{trail}")]


SCRIPTS["shape_edit_undo"] = [t("read", filePath=ROUTES)] + [
    s for r in range(12) for s in _routes_round(r)] + [{"text": "The routes table is in place."}]

# 3a. Edits that never change the outcome: 20 edits of summary.py's comment line, each followed by the
# same check, which passes (exit 0) with the same output every time.
SCRIPTS["shape_edit_same_pass"] = [t("read", filePath=SUMMARY)] + [s for r in range(1, 21) for s in (
    edit(SUMMARY, "# rounding: " + ("half-up" if r == 1 else f"variant {r - 1}"), f"# rounding: variant {r}"),
    t("bash", command="python3 tools/summary.py"),
)] + [{"text": "summary.py still prints the same totals."}]

# 3b. The same compile failure after each of 16 edits: report.py has a missing colon on line 9; the edits
# change the constant on line 3, and py_compile fails the same way each time (exit 1).
SCRIPTS["shape_edit_same_compile_failure"] = [t("read", filePath=REPORT)] + [
    s for r in range(1, 17) for s in (
        edit(REPORT, f"WIDTH = {70 + r}", f"WIDTH = {71 + r}"),
        t("bash", command="python3 -m py_compile tools/report.py"),
    )] + [{"text": "report.py still does not compile."}]

# 4. Different calls answered by the same error: 58 different malformed commands, each one with an
# unmatched quote, so bash answers every one with one of the same two errors (exit 2).
_WORDS = ["parse_amount", "amount", "cents", "currency", "Decimal", "round", "total", "invoice",
          "ValueError", "strip", "split", "format", "rate", "tax", "price", "discount", "refund",
          "balance", "ledger", "charge", "fee", "credit", "debit", "sum", "precision", "locale",
          "symbol", "quantize", "rounding"]
SCRIPTS["shape_same_error"] = [
    t("bash", command=f'grep -n "{w} src/billing.py' if i % 2 == 0 else f"grep -rn '{w} src")
    for i, w in enumerate(w for w in _WORDS for _ in range(2))] + [
    {"text": "The shell keeps rejecting the search."}]

# 5. The same round again: one round of 10 searches and reads over the same files, three times over,
# nothing edited (a cycle longer than 8 calls).
ROUND = [
    t("grep", pattern="parse_amount", path="{ROOT}/src"),
    t("read", filePath=BILLING),
    t("glob", pattern="docs/*.md"),
    t("read", filePath=SPEC, offset=1, limit=25),
    t("grep", pattern="def route_1\\d\\b", path="{ROOT}/src"),
    t("read", filePath=DISPATCH, offset=101, limit=40),
    t("read", filePath=GUIDE, offset=1, limit=30),
    t("grep", pattern="requirement number 4", path="{ROOT}/docs"),
    t("read", filePath=SPEC, offset=26, limit=25),
    t("bash", command="ls src tools"),
]
SCRIPTS["shape_same_round"] = ROUND * 3 + [{"text": "I have the picture of billing and routing."}]

# 6. Near-identical searches for one symbol, cycled: six spellings of a search for parse_amount, four
# times over, through the grep tool and through bash.
SEARCHES = [
    t("grep", pattern="parse_amount"),
    t("grep", pattern="parse_amount\\("),
    t("grep", pattern="def parse_amount"),
    t("bash", command="grep -rn parse_amount src"),
    t("grep", pattern="\\bparse_amount\\b", include="*.py"),
    t("bash", command="grep -rn 'def parse_amount' ."),
]
SCRIPTS["shape_symbol_search"] = SEARCHES * 4 + [{"text": "parse_amount is defined in src/billing.py."}]

# 7. A parent re-spawning the same subagent: the same task (agent, description, prompt) six times; each
# child repeats the last one's reads.
SCRIPTS["shape_respawn_parent"] = [
    t("task", description="Find where amounts are parsed", subagent_type="explore",
      prompt="SCRIPT:shape_respawn_child Find where amounts are parsed.") for _ in range(6)] + [
    {"text": "The explorer keeps reporting the same files."}]
SCRIPTS["shape_respawn_child"] = [
    t("grep", pattern="parse_amount", path="{ROOT}/src"),
    t("read", filePath=BILLING),
    t("read", filePath=SPEC, offset=1, limit=20),
    t("read", filePath=DISPATCH, offset=1, limit=30),
    t("glob", pattern="src/*.py"),
    {"text": "Amounts are parsed in src/billing.py."}]

# 8. Paging passes: three full passes over the 300-line runbook through shifting windows (6 + 7 + 8
# reads), nothing edited.
SCRIPTS["shape_paging_passes"] = (
    [t("read", filePath=RUNBOOK, offset=1 + 50 * i, limit=50) for i in range(6)]
    + [t("read", filePath=RUNBOOK, offset=1 + 45 * i, limit=45) for i in range(7)]
    + [t("read", filePath=RUNBOOK, offset=1 + 38 * i, limit=38) for i in range(8)]
    + [{"text": "Read the runbook three times over."}])

# Hard negative: a tree walk with `cd X && ls -a`. Normalised, every call has the same target, but every
# output differs: exploration.
TREE = ["pkg"] + [f"pkg/{a}" for a in ("core", "io", "net", "ui")] + [
    f"pkg/{a}/{b}" for a in ("core", "io", "net", "ui") for b in ("impl", "tests", "docs")]
SCRIPTS["shape_tree_walk"] = [t("bash", command=f"cd {d} && ls -a") for d in TREE] + [
    t("read", filePath="{ROOT}/pkg/net/impl/pkg_net_impl.py"),
    {"text": "The network code lives in pkg/net/impl."}]

# Hard negative: test re-runs between real edits, the output changing each time: eight unit conversions
# fixed one by one, the test run after each fix reporting one failure fewer.
UNIT_FIXES = [("km_to_m", 1000), ("m_to_cm", 100), ("cm_to_mm", 10), ("kg_to_g", 1000),
              ("g_to_mg", 1000), ("h_to_min", 60), ("min_to_s", 60), ("l_to_ml", 1000)]
SCRIPTS["shape_tests_change"] = [t("read", filePath=UNITS), t("bash", command="python3 tools/test_units.py")] + [
    s for name, factor in UNIT_FIXES for s in (
        edit(UNITS, f"def {name}(x):\n    return x\n", f"def {name}(x):\n    return x * {factor}\n"),
        t("bash", command="python3 tools/test_units.py"),
    )] + [t("bash", command="git add -A && git commit -q -m 'units: all conversions'"),
          {"text": "All eight conversions pass."}]


def make_files(proj):
    """Writes the files the scripts above work on into the scenario project `proj`."""
    import os

    def put(rel, text):
        os.makedirs(os.path.dirname(f"{proj}/{rel}"), exist_ok=True)
        with open(f"{proj}/{rel}", "w") as f:
            f.write(text)

    put("src/cart.py", "def total(items):\n    return sum(i['price'] * i['qty'] for i in items)\n")
    put("src/routes.py", "\n".join(ROUTES_LEAD + ROUTES_BLOCK + ROUTES_TRAIL) + "\n")
    put("tools/summary.py", "# summary.py - totals of the demo rows\n# rounding: half-up\n\n"
                            "ROWS = [3, 4, 5]\nprint('summary: %d rows, total %d' % (len(ROWS), sum(ROWS)))\n")
    put("tools/report.py", "# report.py - prints a table\n\nWIDTH = 71\n\n\ndef header():\n"
                           "    return '-' * WIDTH\n\ndef render(rows)\n    return [header()] + rows\n")
    put("src/billing.py", "from decimal import Decimal\n\n\ndef parse_amount(text):\n"
                          "    return Decimal(text.strip().lstrip('$'))\n\n\ndef total(lines):\n"
                          "    return sum(parse_amount(x) for x in lines)\n")
    put("docs/runbook.md", "\n".join(["# Runbook", ""] + [f"Step {i}: check the service, then note the result."
                                                          for i in range(3, 301)]) + "\n")
    for d in TREE:
        leaf = d.replace("/", "_")
        put(f"{d}/{leaf}.py", f"# {d}\n")
        if d.count("/") == 2:
            put(f"{d}/.{leaf}.cfg", "enabled = true\n")
    fixes = "".join(f"def {name}(x):\n    return x\n\n\n" for name, _ in UNIT_FIXES)
    put("tools/units.py", fixes.rstrip() + "\n")
    cases = ", ".join(f"('{name}', units.{name}(2), {2 * factor})" for name, factor in UNIT_FIXES)
    put("tools/test_units.py", "import sys\nimport units\n\n"
                               f"cases = [{cases}]\n"
                               "bad = [n for n, got, want in cases if got != want]\n"
                               "print('failing:', ' '.join(bad) if bad else 'none')\n"
                               "sys.exit(1 if bad else 0)\n")
