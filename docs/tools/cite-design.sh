#!/usr/bin/env bash
# Rewrites citations of the old design record, and of documents the
# repository does not have, into pointers at docs/DESIGN.md anchors, then
# lists the lines that still need a hand-written rewording (exit status 3).
# Idempotent: run it again after merging branches that touched comments.
#
#   docs/tools/cite-design.sh        rewrite in place
#   docs/tools/cite-design.sh -n     print what would change, write nothing
#   docs/tools/cite-design.sh -v     rewrite and print every citation rewritten
#
# The mapping lives in internal/designdoc (rewrite.go); the test
# internal/designdoc.TestNoStaleCitations names any file still citing one.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go run ./internal/designdoc/citedesign "$@"
