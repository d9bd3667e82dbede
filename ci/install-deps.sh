#!/usr/bin/env bash
# Installs what the tests need that a fresh machine lacks. Idempotent; safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup component add rustfmt clippy >/dev/null 2>&1 || true
