#!/usr/bin/env bash
# A cluster of real processes over object-store-wal (issue 45): three nodes, two
# coordinators on etcd's election, and the frontends' load, all child processes of
# `osw-cluster run`, over the S3-API server (moto) and etcd of scripts/servers.sh (a
# state directory of this run only, stopped however the run ends). Prints the checker's
# JSON line last; the exit code is non-zero on any loss, duplicate, entry out of order or
# zombie acknowledgement.
#
#   scripts/cluster.sh --seconds 30                          # no chaos
#   scripts/cluster.sh --seconds 60 --kills 2 --pauses 1 --coordinator-kills 1
#
# Every flag goes to `osw-cluster run` (`--help` lists them). Builds cluster/ in release
# (CLUSTER_PROFILE=dev: unoptimized, reusing the workspace's debug build of the shared
# dependencies, as .ci/run does to keep its time)
# (its own Cargo.lock, outside the workspace); etcd-client needs protoc and the protobuf
# well-known types, installed from Debian (protobuf-compiler, libprotobuf-dev) when
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/osw-target-$(pwd | cksum | cut -d' ' -f1)}

if ! command -v protoc >/dev/null || [ ! -f /usr/include/google/protobuf/descriptor.proto ]; then
    echo "cluster.sh: installing protoc (Debian's protobuf-compiler, libprotobuf-dev)" >&2
    sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    {
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            protobuf-compiler libprotobuf-dev ||
            {
                "${sudo[@]}" apt-get update &&
                    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y \
                        --no-install-recommends protobuf-compiler libprotobuf-dev
            }
    } >/dev/null
fi
PROFILE=${CLUSTER_PROFILE:-release}
cargo build --profile "$PROFILE" --locked -j"${CLUSTER_JOBS:-2}" --manifest-path cluster/Cargo.toml
BIN_DIR=$CARGO_TARGET_DIR/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")

OSW_SERVERS_STATE=$(mktemp -d "${TMPDIR:-/tmp}/osw-cluster-servers.XXXXXX")
export OSW_SERVERS_STATE
RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/osw-cluster-run.XXXXXX")
trap 'scripts/servers.sh stop; rm -rf "$RUN_DIR"' EXIT
scripts/servers.sh start >/dev/null
# shellcheck source=/dev/null
source "$OSW_SERVERS_STATE/env"
: "${OSW_ETCD_ENDPOINT:?servers.sh did not name etcd}" "${WAL_TEST_S3:?servers.sh did not name the S3 server}"

status=0
"$BIN_DIR/osw-cluster" run --dir "$RUN_DIR" "$@" >"$RUN_DIR/result.json" || status=$?
if [ "$status" != 0 ]; then
    # What the children said, for the log.
    for f in "$RUN_DIR"/*.log; do
        [ -f "$f" ] || continue
        echo "== $(basename "$f") (last lines)" >&2
        tail -n 15 "$f" >&2
    done
fi
tail -n 1 "$RUN_DIR/result.json"
exit "$status"
