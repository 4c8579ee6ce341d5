#!/usr/bin/env bash
# Shellgate's main job on its embedded defaults: an agent's question about a
# CSV answered through the model gateway, the model's pandas call running in
# a sandbox during the request.
#
# With a real provider: SHELLGATE_CONFIG=providers.yaml (docs/providers.md)
# and SHELLGATE_DEMO_MODEL=provider/model, with its key in the
# environment variable the config names. Without one, the question goes to
# Shellgate's scripted demo model (`shellgate scripted-upstream`), which says
# plainly that it is scripted; everything else is real: the server, the
# sandbox, pandas, the files and the bill.
#
# Then the same CSV through the containers API with curl: create a
# container, upload the CSV, exec pandas, list and download the file it
# wrote.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
phase() { printf 'demo: %s (%ds)\n' "$*" "$((SECONDS - start))"; }

tmp="$(mktemp -d)"
pids=()
stop() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap stop EXIT

# Setup, in phases that overlap where they can. shellgate's own build
# (CPU-bound, from the Go module proxy) needs none of the Debian packages,
# so it runs in the background while they install; the Debian image
# (mostly download and dpkg) needs both. gVisor's runsc is not built here:
# it is a second cold Go build as long as shellgate's, and a first run
# does not need it. Without it serve picks the next runtime, crun (seccomp,
# no new privileges, no capabilities, read-only root); `make setup` (or
# `make test`) builds runsc, and serve picks it from then on.
phase "building shellgate in the background (about 4 minutes on a fresh 2-core machine)"
${MAKE:-make} --no-print-directory build >"$tmp/build.log" 2>&1 &
build=$!
pids+=("$build")
phase "Debian packages beside it (about a minute on a fresh machine)"
scripts/setup-host.sh packages
phase "waiting for the shellgate build"
if ! wait "$build"; then
	cat "$tmp/build.log" >&2
	exit 1
fi
pids=()
phase "the Debian image with Python and pandas (about 1.5 minutes)"
bin/shellgate image build
phase "setup done"

ADDR=127.0.0.1:8080 # shellgate serve's default
BASE="http://$ADDR"

config="${SHELLGATE_CONFIG:-}"
model="${SHELLGATE_DEMO_MODEL:-}"
if [ -z "$config" ] || [ -z "$model" ]; then
	echo "demo: no provider configured (SHELLGATE_CONFIG, SHELLGATE_DEMO_MODEL): using the scripted demo model"
	bin/shellgate scripted-upstream --addr 127.0.0.1:9999 2>"$tmp/model.log" &
	pids+=($!)
	config="$tmp/providers.yaml"
	cat >"$config" <<-'YAML'
		providers:
		  demo:
		    api: chat_completions
		    base_url: http://127.0.0.1:9999/v1
	YAML
	model=demo/scripted
fi

bin/shellgate serve --config "$config" 2>"$tmp/server.log" &
server=$!
pids=("$server" "${pids[@]}")
for _ in $(seq 100); do
	curl -sf "$BASE/healthz" >/dev/null && break
	kill -0 "$server" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
	sleep 0.1
done
curl -sf "$BASE/healthz" >/dev/null || { echo "demo: the server did not come up; its log:" >&2; cat "$tmp/server.log" >&2; exit 1; }
rt=$(jq -Rr 'fromjson? | select(.msg == "serving") | .runtime' "$tmp/server.log")
if [ "$rt" = runsc ]; then
	echo "demo: sandboxes run under gVisor (runsc)"
else
	echo "demo: sandboxes run under ${rt:-?}: gVisor's runsc, the stronger isolation and serve's default where it works, is not built yet; \`make setup\` builds it (a few minutes on a fresh machine)"
fi

KEY=$(bin/shellgate keys create --account demo --workspace demo | tail -n 1)
say() { printf '\n$ %s\n' "$*"; }
call() { curl -sS -H "Authorization: Bearer $KEY" "$@"; }

cat >"$tmp/sales.csv" <<'CSV'
order_id,region,product,quantity,unit_price
1,north,widget,3,2.5
2,south,gadget,1,10
3,north,gadget,2,10
4,east,widget,10,2.5
5,north,widget,4,2.5
6,south,widget,6,2.5
7,east,gadget,1,10
CSV

echo
echo "Question: what is the total revenue of each region in sales.csv?"

say "curl -F purpose=user_data -F file=@sales.csv $BASE/v1/files"
file=$(call -F purpose=user_data -F "file=@$tmp/sales.csv" "$BASE/v1/files")
echo "$file" | jq -c .
file_id=$(echo "$file" | jq -r .id)

say "curl $BASE/v1/responses -d '{\"model\":\"$model\",\"input\":...,\"tools\":[{\"type\":\"shell\",\"environment\":{\"type\":\"container_auto\",\"file_ids\":[\"$file_id\"]}}]}'"
jq -n --arg model "$model" --arg file "$file_id" '{
	model: $model,
	input: "What is the total revenue (quantity * unit_price) of each region in sales.csv? Use the shell.",
	tools: [{type: "shell", environment: {type: "container_auto", file_ids: [$file]}}]
}' >"$tmp/request.json"
resp=$(call "$BASE/v1/responses" -H 'Content-Type: application/json' --data-binary @"$tmp/request.json")
if [ "$(echo "$resp" | jq -r '.object // empty')" != response ]; then
	echo "$resp" | jq . >&2 || echo "$resp" >&2
	exit 1
fi
echo "$resp" | jq '{status, items: [.output[] | if .type == "shell_call" then {type, commands: .action.commands, container: .environment.container_id}
	elif .type == "shell_call_output" then {type, output: [.output[] | {stdout, outcome}]}
	else {type, text: ([.content[]?.text] | join(""))} end], usage}'
echo
echo "The model's answer:"
echo "$resp" | jq -r '[.output[] | select(.type == "message") | .content[].text] | last'

echo
echo "The same CSV through the containers API:"
API="$BASE/api/v1"
say "curl -X POST $API/containers -d '{\"name\":\"demo-csv\"}'"
call -X DELETE "$API/containers/demo-csv" >/dev/null # a previous run's
call -X POST "$API/containers" -d '{"name":"demo-csv"}' | jq -c '{id, name, status}'

say "curl -F file=@sales.csv $API/containers/demo-csv/files"
call -F "file=@$tmp/sales.csv" "$API/containers/demo-csv/files" | jq -c .

say "curl -X POST $API/containers/demo-csv/exec -d '{\"commands\": [pandas: revenue by region, written to report.csv]}'"
call -X POST "$API/containers/demo-csv/exec" --data-binary @- <<'JSON' | jq .
{"commands": [
  "python3 -c \"import pandas as pd; df = pd.read_csv('sales.csv'); df['revenue'] = df.quantity * df.unit_price; r = df.groupby('region').revenue.sum(); r.to_csv('report.csv'); print('north revenue:', r['north'])\""
]}
JSON

say "curl $API/containers/demo-csv/files"
files=$(call "$API/containers/demo-csv/files")
echo "$files" | jq -c '.data[] | {id, path, bytes}'
report=$(echo "$files" | jq -r '.data[] | select(.path | endswith("report.csv")) | .id')

say "curl $API/containers/demo-csv/files/$report/content"
call "$API/containers/demo-csv/files/$report/content"

say "curl -X DELETE $API/containers/demo-csv"
call -X DELETE "$API/containers/demo-csv" | jq -c .
