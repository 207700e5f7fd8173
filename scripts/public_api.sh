#!/usr/bin/env bash
# Prints both crates' public API (items, declarations, methods, implemented traits) as
# rustdoc renders it, and fails if a runtime internal appears there or if it differs from
# the reviewed docs/public-api.txt. UPDATE_PUBLIC_API=1 rewrites that file.
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTDOCFLAGS="-D warnings" cargo doc -j2 --no-deps --workspace --all-features
PUBLIC_API_STRICT=1 cargo test -j2 -p object-store-wal-actors --all-features --test public_api -- --ignored --nocapture
