#!/usr/bin/env bash
# Fails when plugins/storepb no longer matches what plugins/gen.sh generates
# from plugins/proto/store.proto. CI starts from a clean machine, so this
# installs protoc (through apt, as root) when it is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

if ! command -v protoc >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		log=$(mktemp)
		if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler; } >"$log" 2>&1; then
			cat "$log" >&2
		fi
		rm -f "$log"
	fi
	if ! command -v protoc >/dev/null 2>&1; then
		echo "check-generated: protoc is not installed and could not be installed;" >&2
		echo "check-generated: run 'apt-get install protobuf-compiler' as root, then retry" >&2
		exit 1
	fi
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$here/gen.sh" "$tmp" >/dev/null

# The generated header names the protoc release that ran; a different patch
# release of protoc produces the same code, so that one line is not compared.
if ! d=$(diff -ru -I '^//[[:space:]]*protoc[[:space:]]' "$here/storepb" "$tmp" 2>&1); then
	echo "check-generated: plugins/storepb is stale; run plugins/gen.sh and commit the result:" >&2
	printf '%s\n' "$d" >&2
	exit 1
fi
echo "plugins/storepb is up to date"
