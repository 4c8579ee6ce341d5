#!/usr/bin/env bash
# Shellgate's main job on its embedded defaults: answer a question about a
# CSV by running Python with pandas in an isolated sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
bin/shellgate image build
csv="$(mktemp --suffix=.csv)"
trap 'rm -f "$csv"' EXIT
cat > "$csv" <<'CSV'
order_id,region,product,quantity,unit_price
1,north,widget,3,2.50
2,south,gadget,1,10.00
3,north,gadget,2,10.00
4,east,widget,10,2.50
5,north,widget,4,2.50
6,south,widget,6,2.50
7,east,gadget,1,10.00
CSV
echo
echo "Question: what is the total revenue of the north region?"
echo
bin/shellgate exec --sandbox demo-csv --copy-in "$csv:sales.csv" -- \
	'head -3 sales.csv' \
	"python3 -c \"import pandas as pd; df = pd.read_csv('sales.csv'); df['revenue'] = df.quantity * df.unit_price; print('north revenue:', df[df.region == 'north'].revenue.sum())\""
