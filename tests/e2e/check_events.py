#!/usr/bin/python3
"""Checks structured events against docs/events.schema.json (docs/events.md).

  check_events.py --schema S --docs D --sources DIR [--expect K1,K2,...] FILE...

Every line of every FILE must be one JSON object valid under the schema (the
error names the file, line and the kind's definition). --expect: kinds that
must occur. --sources: every kind emitted in the C++ sources under DIR (a
string literal in the call of Emit or EmitEvent) must have a definition in
the schema, and every definition a section in --docs, and the reverse.
Exit 0 when all holds; otherwise every problem on stderr, exit 1.
"""
import argparse
import json
import os
import re
import sys

import jsonschema

SOURCE_DIRS = ("apps", "client", "common", "coordinator", "server", "recovery", "storage",
               "consistency", "kernels", "python", "include")
CALL = re.compile(r"\b(?:Emit|EmitEvent)\(")
LITERAL = re.compile(r'"([a-z][a-z0-9_]*)"')


def emitted_kinds(src):
    """kind -> first 'path:line' that emits it."""
    found = {}
    for top in SOURCE_DIRS:
        for root, _, files in os.walk(os.path.join(src, top)):
            for name in files:
                if not name.endswith((".cc", ".h", ".cpp")):
                    continue
                path = os.path.join(root, name)
                text = open(path, encoding="utf-8", errors="replace").read()
                for m in CALL.finditer(text):
                    # The kind is a literal before the fields' brace or the
                    # statement's end (a ternary may name two).
                    end = min(i for i in (text.find("{", m.end()), text.find(";", m.end()))
                              if i >= 0)
                    for kind in LITERAL.findall(text[m.end():end]):
                        line = text.count("\n", 0, m.start()) + 1
                        found.setdefault(kind, f"{os.path.relpath(path, src)}:{line}")
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--schema", required=True)
    ap.add_argument("--docs", required=True)
    ap.add_argument("--sources")
    ap.add_argument("--expect", default="")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    schema = json.load(open(args.schema))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    defs = schema["$defs"]
    problems = []
    seen = {}
    lines = 0
    for path in args.files:
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            lines += 1
            try:
                event = json.loads(line)
            except ValueError as e:
                problems.append(f"{path}:{n}: not JSON ({e}): {line.strip()[:200]}")
                continue
            kind = event.get("kind") if isinstance(event, dict) else None
            if kind in defs:
                # The kind's own definition gives a readable error.
                errors = list(jsonschema.Draft202012Validator(
                    dict(defs[kind], **{"$defs": defs})).iter_errors(event))
            else:
                errors = list(validator.iter_errors(event))
            for e in errors[:3]:
                problems.append(f"{path}:{n}: kind {kind!r}: {e.message}")
            if not errors:
                seen[kind] = seen.get(kind, 0) + 1
    for kind in filter(None, args.expect.split(",")):
        if kind not in seen:
            problems.append(f"expected kind {kind!r} never occurred (seen: {sorted(seen)})")
    docs = open(args.docs, encoding="utf-8").read()
    documented = set(re.findall(r"^### `([a-z0-9_]+)`", docs, re.M))
    for kind in sorted(set(defs) - documented):
        problems.append(f"kind {kind!r} is in the schema but has no section in {args.docs}")
    for kind in sorted(documented - set(defs)):
        problems.append(f"kind {kind!r} is documented in {args.docs} but not in the schema")
    if args.sources:
        emitted = emitted_kinds(args.sources)
        if len(emitted) < 10:
            problems.append(f"found only {len(emitted)} emitted kinds in {args.sources}: the "
                            "source scan is broken")
        for kind, where in sorted(emitted.items()):
            if kind not in defs:
                problems.append(f"{where}: emits kind {kind!r}, which the schema does not define")
        print(f"sources: {len(emitted)} kinds emitted, all in the schema"
              if not any("emits kind" in p for p in problems) else "sources: see problems")
    for p in problems:
        print("PROBLEM: " + p, file=sys.stderr)
    print(f"{lines} line(s) in {len(args.files)} file(s); kinds seen: "
          + ", ".join(f"{k}={v}" for k, v in sorted(seen.items())))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
