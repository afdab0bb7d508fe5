#!/usr/bin/env python3
"""Prints one closing line for the whole suite from meson's testlog.json: the test cases that
doctest and pytest report inside each meson test, added up ("N passed, N failed, N skipped")."""
import json
import re
import sys

passed = failed = skipped = 0
for line in open(sys.argv[1], encoding="utf-8"):
    entry = json.loads(line)
    out = entry.get("stdout", "") or ""
    doctest = re.search(r"test cases:\s*(\d+) \|\s*(\d+) passed \|\s*(\d+) failed \|\s*(\d+) skipped", out)
    pytest_counts = dict((k, int(v)) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", out.splitlines()[-1] if out.strip() else ""))
    if doctest:
        passed += int(doctest.group(2)); failed += int(doctest.group(3)); skipped += int(doctest.group(4))
    elif pytest_counts:
        passed += pytest_counts.get("passed", 0)
        failed += pytest_counts.get("failed", 0) + pytest_counts.get("error", 0)
        skipped += pytest_counts.get("skipped", 0)
    elif entry.get("result") == "OK":
        passed += 1
    elif entry.get("result") == "SKIP":
        skipped += 1
    else:
        failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
