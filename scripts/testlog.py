#!/usr/bin/env python3
"""testlog.py: read `go test -json` on stdin and print what a person needs
from it: each package's result line, the whole output of every test that
failed (and of a package that failed outside any test), the lines a
passing test logged as notes (t.Logf("note: ...")), and the slowest
top-level tests, so that a CI log shows where the time goes. Exit status 1
when anything failed (go test's own status is checked by the caller too)."""
import json
import sys

out = {}        # (package, test) -> output lines
own = {}        # (package, test) -> seconds, of top-level tests
subs = {}       # (package, test) -> seconds of its direct subtests, summed
failed = False
for line in sys.stdin:
    try:
        ev = json.loads(line)
    except ValueError:
        print(line, end="")  # not test2json: a build error, say
        continue
    pkg, test, action = ev.get("Package", ""), ev.get("Test", ""), ev.get("Action")
    key = (pkg, test)
    if action == "output":
        out.setdefault(key, []).append(ev.get("Output", ""))
        continue
    if action not in ("pass", "fail", "skip"):
        continue
    if action == "fail":
        failed = True
    if test == "":
        lines = out.pop(key, [])
        if action == "fail":
            # A test still running when its package died (a panic, the
            # timeout) never ends: its output is the story.
            for k in [k for k in out if k[0] == pkg]:
                print("".join(out.pop(k)), end="")
            print("".join(lines), end="")
        else:
            print("".join(l for l in lines if l.startswith(("ok", "?", "FAIL", "---"))), end="")
        sys.stdout.flush()
        continue
    lines = out.pop(key, [])
    if action == "fail":
        print("".join(lines), end="")
    else:
        print("".join(f"{test}: {l.strip()}\n" for l in lines if ": note: " in l), end="")
    if "Elapsed" in ev:
        top = test.split("/", 1)[0]
        k = (pkg.rsplit("/", 1)[-1], top)
        if "/" not in test:
            own[k] = ev["Elapsed"]
        elif test.count("/") == 1:
            # A parent whose subtests run in parallel ends before them:
            # its own time says nothing of theirs, so they are summed.
            subs[k] = subs.get(k, 0) + ev["Elapsed"]

elapsed = sorted(((max(own.get(k, 0), subs.get(k, 0)), k) for k in set(own) | set(subs)), reverse=True)
if elapsed:
    print("slowest tests (a test's subtests summed):")
    for secs, (pkg, test) in elapsed[:20]:
        print(f"  {secs:7.1f}s  {pkg}.{test}")
sys.exit(1 if failed else 0)
