#!/usr/bin/env python3
"""Rebuilds compute-v1-subset.json: the part of Google's discovery document
for the Compute Engine API v1 that the google provider uses (the methods
below and every schema they reach), from compute/v1/compute-api.json of the
google.golang.org/api Go module (BSD 3-Clause, see LICENSE). Descriptions
are dropped; everything that validates (types, formats, patterns, enums,
required annotations) is kept. Run it when the provider calls another
method, or for a newer document; the tests only read the committed result.

    go mod download -json google.golang.org/api@latest   # prints its Dir
    python3 subset.py <Dir>/compute/v1/compute-api.json
"""
import json
import os
import sys

METHODS = {
    "instances": ["insert", "get", "delete", "list", "getGuestAttributes"],
    "zoneOperations": ["get", "wait"],
}
TOP = ["kind", "id", "name", "version", "revision", "title", "rootUrl", "servicePath", "basePath", "baseUrl",
       "batchPath", "protocol", "discoveryVersion", "parameters", "auth"]


def strip(o):
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if k not in ("description", "enumDescriptions", "enumDeprecated")}
    if isinstance(o, list):
        return [strip(v) for v in o]
    return o


def refs(o, out):
    if isinstance(o, dict):
        if "$ref" in o:
            out.add(o["$ref"])
        for v in o.values():
            refs(v, out)
    elif isinstance(o, list):
        for v in o:
            refs(v, out)


def main(src):
    doc = json.load(open(src))
    sub = {k: doc[k] for k in TOP if k in doc}
    sub["resources"] = {}
    wanted = set()
    for res, methods in METHODS.items():
        ms = doc["resources"][res]["methods"]
        sub["resources"][res] = {"methods": {m: ms[m] for m in methods}}
        refs(sub["resources"][res], wanted)
    schemas, todo = {}, list(wanted)
    while todo:
        name = todo.pop()
        if name in schemas:
            continue
        schemas[name] = doc["schemas"][name]
        more = set()
        refs(schemas[name], more)
        todo.extend(more - set(schemas))
    sub["schemas"] = {k: schemas[k] for k in sorted(schemas)}
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compute-v1-subset.json")
    with open(out, "w") as f:
        json.dump(strip(sub), f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote %s: revision %s, %d schemas" % (out, doc.get("revision"), len(schemas)))


if __name__ == "__main__":
    main(sys.argv[1])
