#!/usr/bin/env bash
# Installs what `make test` and `make demo` need on a fresh machine: the Go
# modules (pinned in go.mod/go.sum) and, as the project grows, Debian packages.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || { echo "install-deps: Go 1.26 is required (go not found)" >&2; exit 1; }
go mod download
