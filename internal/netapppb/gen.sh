#!/usr/bin/env bash
# Regenerates netapppb from proto/google/cloud/netapp/v1 (go generate, make
# generate): protoc from Debian (protobuf-compiler, libprotobuf-dev for the
# well-known types), protoc-gen-go and protoc-gen-go-grpc at the versions
# go.mod's tool directives pin, and the descriptors of
# google/longrunning/operations.proto from the longrunningpb Go package
# (protodeps/main.go), which no .proto file in this tree holds.
set -euo pipefail
cd "$(dirname "$0")"
root=$(git rev-parse --show-toplevel 2>/dev/null || (cd ../.. && pwd))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/" google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc
go run ./protodeps "$tmp/deps.binpb"
rm -f ./*.pb.go
protoc \
  --plugin=protoc-gen-go="$tmp/protoc-gen-go" \
  --plugin=protoc-gen-go-grpc="$tmp/protoc-gen-go-grpc" \
  -I "$root/proto" -I /usr/include \
  --descriptor_set_in="$tmp/deps.binpb" \
  --go_out=. --go_opt=module=github.com/basin-nas/basin/internal/netapppb \
  --go-grpc_out=. --go-grpc_opt=module=github.com/basin-nas/basin/internal/netapppb \
  "$root"/proto/google/cloud/netapp/v1/*.proto
