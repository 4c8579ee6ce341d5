#!/usr/bin/env bash
# Shellgate's main job on its embedded defaults: start the server, make an
# API key, and drive a sandbox over HTTP with curl — create a container, run
# pandas in it to write a CSV and read it back, list, delete — then stop the
# server gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."
bin/shellgate image build

ADDR=127.0.0.1:8080 # shellgate serve's default
API="http://$ADDR/api/v1"
log="$(mktemp --suffix=.log)"
bin/shellgate serve 2>"$log" &
server=$!
stop() {
	kill -TERM "$server" 2>/dev/null && wait "$server" || true
	rm -f "$log"
}
trap stop EXIT
for _ in $(seq 100); do
	curl -sf "http://$ADDR/healthz" >/dev/null && break
	kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
	sleep 0.1
done
curl -sf "http://$ADDR/healthz" >/dev/null || { echo "demo: the server did not come up; its log:" >&2; cat "$log" >&2; exit 1; }

KEY=$(bin/shellgate keys create --account demo --workspace demo | tail -n 1)
say() { printf '\n$ %s\n' "$*"; }
call() { curl -sS -H "Authorization: Bearer $KEY" "$@"; echo; }

echo
echo "Question: what is the total revenue of the north region?"

say "curl -X POST $API/containers -d '{\"name\":\"demo-csv\"}'"
call -X DELETE "$API/containers/demo-csv" >/dev/null # a previous run's
call -X POST "$API/containers" -d '{"name":"demo-csv"}'

say "curl -X POST $API/containers/demo-csv/exec -d '{\"commands\": [write sales.csv with pandas, read it back]}'"
call -X POST "$API/containers/demo-csv/exec" --data-binary @- <<'JSON' | jq .
{"commands": [
  "python3 -c \"import pandas as pd; pd.DataFrame({'order_id': range(1, 8), 'region': ['north','south','north','east','north','south','east'], 'product': ['widget','gadget','gadget','widget','widget','widget','gadget'], 'quantity': [3,1,2,10,4,6,1], 'unit_price': [2.5,10,10,2.5,2.5,2.5,10]}).to_csv('sales.csv', index=False)\"",
  "head -3 sales.csv",
  "python3 -c \"import pandas as pd; df = pd.read_csv('sales.csv'); df['revenue'] = df.quantity * df.unit_price; print('north revenue:', df[df.region == 'north'].revenue.sum())\""
]}
JSON

say "curl $API/containers"
call "$API/containers" | jq .

say "curl -X DELETE $API/containers/demo-csv"
call -X DELETE "$API/containers/demo-csv"
