#!/usr/bin/env bash
# The async example under load: examples/async_service (a TCP service on one
# Asio thread whose withdrawals run under async_lock_on) and concurrent
# clients withdrawing from a few shared accounts. Checks that every account
# ends exactly at its initial balance minus the successful withdrawals.
# Uses $LOCKON_REDIS_URL if set, else starts a throwaway redis-server.
#
#   scripts/async_demo.sh [clients] [withdrawals per client]
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-16}
per_client=${2:-100}
preset=${LOCKON_PRESET:-release}
./scripts/setup-deps.sh >/dev/null
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" --target async_service >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
tmp=$(mktemp -d)
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

url=${LOCKON_REDIS_URL:-}
if [[ -z "$url" ]]; then
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
    --logfile "$tmp/redis.log" &
  pids+=($!)
  url="redis://127.0.0.1:$redis_port"
  for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
fi
service_port=$(free_port)
"./build/$preset/examples/async_service" --port "$service_port" --url "$url" &
pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$service_port") 2>/dev/null && break; sleep 0.05; done

python3 - "$service_port" "$clients" "$per_client" <<'PY'
import socket, sys, threading
port, clients, per_client = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
accounts = ["alice", "bob", "carol"]
initial = clients * per_client // (2 * len(accounts))  # half of what is asked: some must be refused
def call(sock, line):
    sock.sendall((line + "\n").encode())
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise SystemExit("async_demo: the service closed the connection")
        data += chunk
    return data.decode().strip()
setup = socket.create_connection(("127.0.0.1", port))
for a in accounts:
    balance = int(call(setup, f"BALANCE {a}").split()[1])
    if balance:
        call(setup, f"WITHDRAW {a} {balance}")
    call(setup, f"DEPOSIT {a} {initial}")
ok = {a: 0 for a in accounts}
refused = {a: 0 for a in accounts}
lock = threading.Lock()
def client(i):
    s = socket.create_connection(("127.0.0.1", port))
    for n in range(per_client):
        a = accounts[(i + n) % len(accounts)]
        answer = call(s, f"WITHDRAW {a} 1")
        with lock:
            if answer.startswith("OK"): ok[a] += 1
            elif answer.startswith("INSUFFICIENT"): refused[a] += 1
            else: raise SystemExit(f"async_demo: unexpected answer {answer!r}")
threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
exact = True
for a in accounts:
    final = int(call(setup, f"BALANCE {a}").split()[1])
    expected = initial - ok[a]
    print(f"{a}: {ok[a]} withdrawals, {refused[a]} refused, balance {final} (expected {expected})")
    exact = exact and final == expected and final >= 0
print(f"{clients} concurrent clients x {per_client} withdrawals: " + ("EXACT" if exact else "WRONG"))
sys.exit(0 if exact else 1)
PY
