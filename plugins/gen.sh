#!/usr/bin/env bash
# Regenerates the Go code of the store plugin protocol (plugins/storepb) from
# plugins/proto/store.proto. The protoc plugins are pinned here and installed
# into a cache directory named after their versions, so every machine
# generates byte-identical code. protoc itself comes from the system
# (Debian: apt-get install protobuf-compiler).
#
# Usage: plugins/gen.sh [OUTDIR]    (default: plugins/storepb)
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
# v1.6.2 emits code for grpc-go's SupportPackageIsVersion9 API, which the
# module's grpc (v1.85.0) provides.
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-"$here/storepb"}
mkdir -p "$out"

if ! command -v protoc >/dev/null 2>&1; then
	echo "gen.sh: protoc not found; install it (Debian: apt-get install protobuf-compiler)" >&2
	exit 1
fi

bin="${XDG_CACHE_HOME:-$HOME/.cache}/leasekeeper/protoc-gen-go-$PROTOC_GEN_GO_VERSION-grpc-$PROTOC_GEN_GO_GRPC_VERSION"
if [ ! -x "$bin/protoc-gen-go" ] || [ ! -x "$bin/protoc-gen-go-grpc" ]; then
	mkdir -p "$bin"
	# Installing by version ignores this module's go.mod, so the tools keep
	# their own pinned dependencies.
	GOBIN="$bin" GOFLAGS= go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
	GOBIN="$bin" GOFLAGS= go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
fi

protoc -I "$here/proto" \
	--plugin=protoc-gen-go="$bin/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
	--go_out="$out" --go_opt=paths=source_relative \
	--go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
	store.proto
