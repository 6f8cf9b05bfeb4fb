#!/usr/bin/env bash
# (Copied into the repository for the chart's real-API-server tests, tests/chart/cluster.py; the
# binaries come from KUBEBUILDER_ASSETS — envtest's `setup-envtest use -p path`, or CI's copy.)
# start-control-plane.sh — envtest-style local Kubernetes control plane on loopback only.
#
# Starts etcd + kube-apiserver (+ kube-controller-manager with --kcm) bound to 127.0.0.1
# on random free ports, writes an admin kubeconfig, prints its path, and stops every
# process it started (by PID) when it exits.
#
# Usage:
#   start-control-plane.sh [--kcm] [--controllers LIST] [--dir DIR] [--keep] [-- CMD ARGS...]
#
#   Without CMD: starts, prints "KUBECONFIG=<path>", then waits until SIGINT/SIGTERM.
#   With CMD:    starts, runs CMD with KUBECONFIG (and KUBEBUILDER_ASSETS) exported,
#                stops the control plane, and exits with CMD's exit status.
#
# Environment (optional):
#   KUBEBUILDER_ASSETS  folder holding kube-apiserver, etcd[, kube-controller-manager]
#                       (default: the bin/ folder next to this script)
#   ETCD                etcd binary to use (default: $KUBEBUILDER_ASSETS/etcd)
#   CP_START_TIMEOUT    seconds to wait for /readyz (default 120)
#   CP_APISERVER_ARGS   extra kube-apiserver flags (space separated)
#   CP_KCM_ARGS         extra kube-controller-manager flags (space separated)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ASSETS="${KUBEBUILDER_ASSETS:-$HERE/bin}"
ETCD_BIN="${ETCD:-$ASSETS/etcd}"
APISERVER_BIN="$ASSETS/kube-apiserver"
KCM_BIN="$ASSETS/kube-controller-manager"
START_TIMEOUT="${CP_START_TIMEOUT:-120}"

WITH_KCM=0
CONTROLLERS='*'
DIR=""
KEEP=0
CMD=()
while [ $# -gt 0 ]; do
  case "$1" in
    --kcm) WITH_KCM=1; shift ;;
    --controllers) CONTROLLERS="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --) shift; CMD=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

for b in "$ETCD_BIN" "$APISERVER_BIN"; do
  [ -x "$b" ] || { echo "missing binary: $b" >&2; exit 1; }
done
if [ "$WITH_KCM" = 1 ] && [ ! -x "$KCM_BIN" ]; then echo "missing binary: $KCM_BIN" >&2; exit 1; fi
command -v openssl >/dev/null || { echo "openssl is needed" >&2; exit 1; }

if [ -z "$DIR" ]; then DIR="$(mktemp -d "${TMPDIR:-/tmp}/control-plane.XXXXXX")"; fi
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
CERTS="$DIR/certs"; LOGS="$DIR/logs"
mkdir -p "$CERTS" "$LOGS"

PIDS=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # stop in reverse start order, each by its own PID
  local i
  for (( i=${#PIDS[@]}-1; i>=0; i-- )); do
    local p="${PIDS[$i]}"
    if kill -0 "$p" 2>/dev/null; then kill -TERM "$p" 2>/dev/null || true; fi
    local n=0
    while kill -0 "$p" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done
    if kill -0 "$p" 2>/dev/null; then kill -KILL "$p" 2>/dev/null || true; fi
    wait "$p" 2>/dev/null || true
  done
  if [ "$KEEP" = 0 ]; then rm -rf "$DIR"; else echo "kept $DIR" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {  # an unused TCP port on 127.0.0.1
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
ETCD_PORT=$(free_port); ETCD_PEER_PORT=$(free_port); API_PORT=$(free_port); KCM_PORT=$(free_port)

T0=$(date +%s.%N)

# --- certificates and keys (self-generated, loopback SANs only) ---
(
  cd "$CERTS"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 365 \
    -subj "/CN=local-control-plane-ca" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
    -subj "/CN=kube-apiserver" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n' > san.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -out apiserver.crt -days 365 -extfile san.ext >/dev/null 2>&1
  openssl genrsa -out sa.key 2048 >/dev/null 2>&1
  openssl rsa -in sa.key -pubout -out sa.pub >/dev/null 2>&1
  TOKEN=$(openssl rand -hex 24)
  echo "$TOKEN,admin,admin-uid,system:masters" > tokens.csv
  echo "$TOKEN" > admin.token
  chmod 600 ./*.key tokens.csv admin.token
)
TOKEN=$(cat "$CERTS/admin.token")
T_CERTS=$(date +%s.%N)

KUBECONFIG_PATH="$DIR/kubeconfig"
CA_DATA=$(base64 -w0 < "$CERTS/ca.crt")
cat > "$KUBECONFIG_PATH" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $CA_DATA
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: local
  context:
    cluster: local
    user: admin
    namespace: default
current-context: local
EOF
chmod 600 "$KUBECONFIG_PATH"

# --- etcd ---
ETCD_EXTRA=()
if "$ETCD_BIN" --help 2>&1 | grep -q -- '--unsafe-no-fsync'; then ETCD_EXTRA+=(--unsafe-no-fsync); fi
"$ETCD_BIN" \
  --name=default \
  --data-dir="$DIR/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="default=http://127.0.0.1:$ETCD_PEER_PORT" \
  "${ETCD_EXTRA[@]}" \
  >"$LOGS/etcd.log" 2>&1 &
ETCD_PID=$!; PIDS+=("$ETCD_PID")

wait_http() {  # url, pid, name, [extra curl args...]
  local url=$1 pid=$2 name=$3; shift 3
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  until curl -fsS --max-time 2 "$@" "$url" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$name exited early; last log lines:" >&2; tail -n 30 "$LOGS/$name.log" >&2; exit 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "$name not ready after ${START_TIMEOUT}s; last log lines:" >&2; tail -n 30 "$LOGS/$name.log" >&2; exit 1
    fi
    sleep 0.2
  done
}
wait_http "http://127.0.0.1:$ETCD_PORT/health" "$ETCD_PID" etcd
T_ETCD=$(date +%s.%N)

# --- kube-apiserver ---
# shellcheck disable=SC2206
EXTRA_API=(${CP_APISERVER_ARGS:-})
"$APISERVER_BIN" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
  --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 \
  --secure-port="$API_PORT" \
  --endpoint-reconciler-type=none \
  --cert-dir="$CERTS" \
  --tls-cert-file="$CERTS/apiserver.crt" \
  --tls-private-key-file="$CERTS/apiserver.key" \
  --client-ca-file="$CERTS/ca.crt" \
  --token-auth-file="$CERTS/tokens.csv" \
  --authorization-mode=RBAC \
  --service-account-issuer="https://127.0.0.1:$API_PORT" \
  --service-account-key-file="$CERTS/sa.pub" \
  --service-account-signing-key-file="$CERTS/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --allow-privileged=true \
  --disable-admission-plugins=ServiceAccount \
  "${EXTRA_API[@]}" \
  >"$LOGS/kube-apiserver.log" 2>&1 &
API_PID=$!; PIDS+=("$API_PID")
wait_http "https://127.0.0.1:$API_PORT/readyz" "$API_PID" kube-apiserver \
  --cacert "$CERTS/ca.crt" -H "Authorization: Bearer $TOKEN"
T_API=$(date +%s.%N)

# --- kube-controller-manager (optional) ---
if [ "$WITH_KCM" = 1 ]; then
  # shellcheck disable=SC2206
  EXTRA_KCM=(${CP_KCM_ARGS:-})
  "$KCM_BIN" \
    --kubeconfig="$KUBECONFIG_PATH" \
    --bind-address=127.0.0.1 \
    --secure-port="$KCM_PORT" \
    --leader-elect=false \
    --use-service-account-credentials=false \
    --service-account-private-key-file="$CERTS/sa.key" \
    --root-ca-file="$CERTS/ca.crt" \
    --controllers="$CONTROLLERS" \
    "${EXTRA_KCM[@]}" \
    >"$LOGS/kube-controller-manager.log" 2>&1 &
  KCM_PID=$!; PIDS+=("$KCM_PID")
  wait_http "https://127.0.0.1:$KCM_PORT/healthz" "$KCM_PID" kube-controller-manager -k
fi
T_END=$(date +%s.%N)

{
  echo "control plane up in $(python3 -c "print(round($T_END-$T0,2))")s:" \
       "certs $(python3 -c "print(round($T_CERTS-$T0,2))")s," \
       "etcd healthy $(python3 -c "print(round($T_ETCD-$T_CERTS,2))")s," \
       "apiserver /readyz $(python3 -c "print(round($T_API-$T_ETCD,2))")s after etcd" \
       "$( [ "$WITH_KCM" = 1 ] && echo ", controller-manager /healthz $(python3 -c "print(round($T_END-$T_API,2))")s")"
  echo "etcd pid=$ETCD_PID http://127.0.0.1:$ETCD_PORT"
  echo "kube-apiserver pid=$API_PID https://127.0.0.1:$API_PORT"
  [ "$WITH_KCM" = 1 ] && echo "kube-controller-manager pid=$KCM_PID https://127.0.0.1:$KCM_PORT"
  echo "logs: $LOGS"
} >&2
echo "KUBECONFIG=$KUBECONFIG_PATH"

export KUBECONFIG="$KUBECONFIG_PATH" KUBEBUILDER_ASSETS="$ASSETS"
if [ ${#CMD[@]} -gt 0 ]; then
  set +e
  "${CMD[@]}"
  rc=$?
  set -e
  exit $rc
fi
# no command: keep running until interrupted; leave if a component dies
while :; do
  for p in "${PIDS[@]}"; do
    if ! kill -0 "$p" 2>/dev/null; then echo "process $p exited; stopping" >&2; exit 1; fi
  done
  sleep 1
done
