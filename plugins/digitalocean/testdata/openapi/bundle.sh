#!/bin/sh
# Rebuilds digitalocean-v2.json, the part of DigitalOcean's official OpenAPI
# specification that the provider uses, from a checkout of
# https://github.com/digitalocean/openapi (Apache License 2.0, see LICENSE).
# Run once, offline, when the spec or the provider's endpoints change; the
# tests only read the committed result. Needs node and @redocly/cli
# (npm install @redocly/cli).
#
#   sh bundle.sh /path/to/digitalocean-openapi [redocly]
set -eu
src=${1:?usage: bundle.sh DIGITALOCEAN_OPENAPI_CHECKOUT [REDOCLY]}
redocly=${2:-redocly}
here=$(cd "$(dirname "$0")" && pwd)
cp "$here/subset.yaml" "$src/specification/loom-subset.yaml"
trap 'rm -f "$src/specification/loom-subset.yaml" "$here/.bundle.json"' EXIT
"$redocly" bundle "$src/specification/loom-subset.yaml" -o "$here/.bundle.json"
# Code samples and examples are documentation, not schema: drop them to
# keep the file small.
node -e '
const fs = require("fs");
const strip = (o) => Array.isArray(o) ? o.map(strip) : (o && typeof o === "object")
  ? Object.fromEntries(Object.entries(o).filter(([k]) => k !== "x-codeSamples" && k !== "examples").map(([k, v]) => [k, strip(v)]))
  : o;
const spec = strip(JSON.parse(fs.readFileSync(process.argv[1], "utf8")));
fs.writeFileSync(process.argv[2], JSON.stringify(spec, null, 1) + "\n");
' "$here/.bundle.json" "$here/digitalocean-v2.json"
echo "wrote $here/digitalocean-v2.json from $(git -C "$src" rev-parse HEAD 2>/dev/null || echo "$src")"
