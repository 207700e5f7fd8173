#!/usr/bin/env bash
# Local servers for the tests: an S3-API server (moto, from PyPI), Azure Blob (Azurite,
# from npm) and etcd (Debian's etcd-server, for the cluster package's coordination), all
# listening on 127.0.0.1 only.
#
#   scripts/servers.sh start    install (once, quietly), start them, wait until they answer,
#                               create the bucket and the container, print `export` lines
#   scripts/servers.sh env      print the `export` lines of the running servers
#   scripts/servers.sh stop     stop them (by their pid files) and delete their data
#
# moto runs through scripts/s3_server.py (moto's server with its writes serialized).
#
#   eval "$(scripts/servers.sh start)"   # or: source "$OSW_SERVERS_STATE/env"
#   cargo test --workspace --all-features
#   scripts/servers.sh stop
#
# The exports name the servers for the tests (WAL_TEST_S3, WAL_TEST_AZURE: store URLs)
# and set what object_store's builders read from the environment (AWS_*, AZURE_*,
# AZURITE_BLOB_STORAGE_URL), and etcd's client URL for the cluster package
# (OSW_ETCD_ENDPOINT). Without them the server tests are skipped.
#
# etcd comes from Debian's etcd-server package (3.4), installed with apt-get only when no
# `etcd` is on the PATH. Ours runs on a free port with its data in $OSW_SERVERS_STATE; the
# package's own service (which Debian may start on 2379 where systemd runs) is not used.
#
# OSW_SERVERS_HOME   where the tools are installed (default ~/.cache/osw-servers)
# OSW_SERVERS_STATE  pid files, logs, data and the env file of one running pair
#                    (default $OSW_SERVERS_HOME/run; .ci/run uses a fresh directory)
# Status goes to stderr; stdout carries only the export lines.
set -euo pipefail

# moto answers `If-None-Match: *` on PutObject with 412 (first bytes kept); its check and
# store are not atomic under concurrent requests, which s3_server.py fixes with a lock.
MOTO_VERSION=5.2.5
AZBLOB_VERSION=12.31.1 # azure-storage-blob: creates the container
# Azurite answers `If-None-Match: *` with 409 BlobAlreadyExists (object_store maps it to
# AlreadyExists). 3.35 is the last release that declares support for node 20 (3.36
# asks for node >= 21, 3.37 for >= 22).
AZURITE_VERSION=3.35.0
BUCKET=osw-test
CONTAINER=osw-test
# The storage emulator's well-known development account (public, the same everywhere).
AZ_ACCOUNT=devstoreaccount1
AZ_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
READY_SECONDS=60

HOME_DIR=${OSW_SERVERS_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/osw-servers}
STATE=${OSW_SERVERS_STATE:-$HOME_DIR/run}
SCRIPTS=$(cd "$(dirname "$0")" && pwd)
VENV=$HOME_DIR/venv
NODE_DIR=$HOME_DIR/node

say() { echo "servers.sh: $*" >&2; }
die() {
    say "$*"
    exit 1
}

install_moto() {
    # moto's S3 and its server (flask), not `moto[server]`, which brings every service.
    local wanted=("moto[s3]==$MOTO_VERSION" "flask!=2.2.0,!=2.2.1" flask-cors
        "azure-storage-blob==$AZBLOB_VERSION")
    if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.osw-packages" 2>/dev/null)" = "${wanted[*]}" ]; then
        return 0
    fi
    say "installing ${wanted[*]} into $VENV"
    python3 -m venv --clear "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "${wanted[@]}" >"$HOME_DIR/pip.log" 2>&1 ||
        {
            cat "$HOME_DIR/pip.log" >&2
            return 1
        }
    echo "${wanted[*]}" >"$VENV/.osw-packages"
}

install_azurite() {
    if [ -x "$NODE_DIR/node_modules/.bin/azurite-blob" ] &&
        [ "$(cat "$NODE_DIR/.osw-azurite" 2>/dev/null)" = "$AZURITE_VERSION" ]; then
        return 0
    fi
    say "installing azurite $AZURITE_VERSION into $NODE_DIR"
    mkdir -p "$NODE_DIR"
    npm install --prefix "$NODE_DIR" --no-audit --no-fund --silent --no-save \
        "azurite@$AZURITE_VERSION" >"$HOME_DIR/npm.log" 2>&1 ||
        {
            cat "$HOME_DIR/npm.log" >&2
            return 1
        }
    echo "$AZURITE_VERSION" >"$NODE_DIR/.osw-azurite"
}

install_etcd() {
    command -v etcd >/dev/null && return 0
    say "installing Debian's etcd-server"
    local sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    {
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server ||
            {
                "${sudo[@]}" apt-get update &&
                    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server
            }
    } >"$HOME_DIR/apt.log" 2>&1 || {
        cat "$HOME_DIR/apt.log" >&2
        return 1
    }
    # Where systemd runs, the package starts its own etcd on 2379: not ours, stopped.
    if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then
        "${sudo[@]}" systemctl disable --now etcd >/dev/null 2>&1 || true
    fi
    command -v etcd >/dev/null
}

install() {
    command -v python3 >/dev/null || die "python3 is needed (moto, azure-storage-blob)"
    command -v npm >/dev/null || die "node and npm are needed (azurite)"
    command -v curl >/dev/null || die "curl is needed"
    mkdir -p "$HOME_DIR"
    # Both at once: each is mostly waiting on the registry.
    install_moto &
    local moto=$!
    install_azurite &
    local azurite=$!
    install_etcd &
    local etcd=$!
    local failed=0
    wait "$moto" || failed=1
    wait "$azurite" || failed=1
    wait "$etcd" || failed=1
    [ "$failed" = 0 ] || die "installation failed"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Whether the server `$1` (s3, azure) of this state directory runs: its pid file names a
# live process that is still that server (not a reused pid).
alive() {
    local pid
    pid=$(cat "$STATE/$1.pid" 2>/dev/null) || return 1
    grep -qaE 's3_server.py|azurite|etcd' "/proc/$pid/cmdline" 2>/dev/null
}

# Waits until `curl` gets any HTTP answer from $2 (a refused connection gives 000).
wait_http() {
    local name=$1 url=$2 deadline=$((SECONDS + READY_SECONDS))
    while :; do
        alive "$name" || {
            tail -n 20 "$STATE/$name.log" >&2
            die "$name exited while starting (log above: $STATE/$name.log)"
        }
        local code
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" || true)
        [ "$code" != 000 ] && return 0
        [ $SECONDS -lt $deadline ] || die "$name did not answer on $url within ${READY_SECONDS}s"
        sleep 0.2
    done
}

write_env() {
    local s3_port azure_port etcd_port
    s3_port=$(cat "$STATE/s3.port")
    azure_port=$(cat "$STATE/azure.port")
    etcd_port=$(cat "$STATE/etcd.port")
    cat >"$STATE/env" <<EOF
export WAL_TEST_S3=s3://$BUCKET
export WAL_TEST_S3_2=s3://$BUCKET-2
export WAL_TEST_S3_3=s3://$BUCKET-3
export AWS_ENDPOINT=http://127.0.0.1:$s3_port
export AWS_ALLOW_HTTP=true
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=osw-test
export AWS_SECRET_ACCESS_KEY=osw-test
export WAL_TEST_AZURE=az://$CONTAINER
export AZURE_STORAGE_USE_EMULATOR=true
export AZURITE_BLOB_STORAGE_URL=http://127.0.0.1:$azure_port
export OSW_ETCD_ENDPOINT=http://127.0.0.1:$etcd_port
export OSW_SERVERS_STATE=$STATE
EOF
}

start() {
    if alive s3 && alive azure && alive etcd && [ -f "$STATE/env" ]; then
        say "already running (state in $STATE)"
        cat "$STATE/env"
        return 0
    fi
    stop_servers
    install
    mkdir -p "$STATE/azurite"
    rm -rf "$STATE/etcd"
    local s3_port azure_port etcd_port etcd_peer_port
    s3_port=${OSW_S3_PORT:-$(free_port)}
    azure_port=${OSW_AZURE_PORT:-$(free_port)}
    etcd_port=${OSW_ETCD_PORT:-$(free_port)}
    etcd_peer_port=$(free_port)
    echo "$s3_port" >"$STATE/s3.port"
    echo "$azure_port" >"$STATE/azure.port"
    echo "$etcd_port" >"$STATE/etcd.port"

    # stdin and stdout away from the caller, so that a pipe reading this script's output
    # (eval "$(...)", CI's log) is not held open by a server.
    # moto_server, with its writes serialized (see s3_server.py: moto's conditional create
    # is not atomic under its threaded server).
    "$VENV/bin/python" "$SCRIPTS/s3_server.py" 127.0.0.1 "$s3_port" </dev/null >"$STATE/s3.log" 2>&1 &
    echo $! >"$STATE/s3.pid"
    "$NODE_DIR/node_modules/.bin/azurite-blob" --skipApiVersionCheck --disableTelemetry \
        --blobHost 127.0.0.1 --blobPort "$azure_port" --location "$STATE/azurite" --silent \
        </dev/null >"$STATE/azure.log" 2>&1 &
    echo $! >"$STATE/azure.pid"
    # One member, its peer port on loopback too (nothing joins it).
    etcd --name osw --data-dir "$STATE/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" \
        --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
        --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
        --initial-cluster "osw=http://127.0.0.1:$etcd_peer_port" \
        </dev/null >"$STATE/etcd.log" 2>&1 &
    echo $! >"$STATE/etcd.pid"

    wait_http s3 "http://127.0.0.1:$s3_port/"
    wait_http azure "http://127.0.0.1:$azure_port/$AZ_ACCOUNT?comp=list"
    wait_http etcd "http://127.0.0.1:$etcd_port/health"

    local code
    code=$(curl -s -o "$STATE/bucket.out" -w '%{http_code}' -X PUT "http://127.0.0.1:$s3_port/$BUCKET")
    [ "$code" = 200 ] || die "creating bucket $BUCKET answered $code: $(cat "$STATE/bucket.out")"
    # Two more buckets: one log over three stores (the crash gate's quorum runs).
    local b
    for b in "$BUCKET-2" "$BUCKET-3"; do
        code=$(curl -s -o "$STATE/bucket.out" -w '%{http_code}' -X PUT "http://127.0.0.1:$s3_port/$b")
        [ "$code" = 200 ] || die "creating bucket $b answered $code: $(cat "$STATE/bucket.out")"
    done
    AZ_URL="http://127.0.0.1:$azure_port/$AZ_ACCOUNT" AZ_ACCOUNT=$AZ_ACCOUNT AZ_KEY=$AZ_KEY \
        "$VENV/bin/python" - "$CONTAINER" <<'EOF' || die "creating container $CONTAINER failed"
import os, sys
from azure.storage.blob import BlobServiceClient
service = BlobServiceClient(os.environ["AZ_URL"], credential={
    "account_name": os.environ["AZ_ACCOUNT"], "account_key": os.environ["AZ_KEY"]})
service.create_container(sys.argv[1])
EOF
    write_env
    say "moto $MOTO_VERSION on 127.0.0.1:$s3_port (bucket $BUCKET), azurite $AZURITE_VERSION on 127.0.0.1:$azure_port (container $CONTAINER), etcd on 127.0.0.1:$etcd_port; env in $STATE/env"
    cat "$STATE/env"
}

stop_servers() {
    local name pid
    for name in s3 azure etcd; do
        [ -f "$STATE/$name.pid" ] || continue
        pid=$(cat "$STATE/$name.pid")
        if alive "$name"; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$STATE/$name.pid"
    done
}

stop() {
    stop_servers
    rm -rf "$STATE/azurite" "$STATE/etcd"
    rm -f "$STATE"/{env,s3.port,azure.port,etcd.port,s3.log,azure.log,etcd.log,bucket.out}
    rmdir "$STATE" 2>/dev/null || true
    say "stopped"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
env)
    [ -f "$STATE/env" ] || die "not running (no $STATE/env)"
    cat "$STATE/env"
    ;;
*)
    echo "usage: $0 start|stop|env" >&2
    exit 2
    ;;
esac
