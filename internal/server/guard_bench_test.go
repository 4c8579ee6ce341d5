package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/internal/gateway/scripted"
)

// BenchmarkGuardrailRequest is what a workspace's guardrails add to a
// gateway request: a Messages request with a 10 KB prompt (no attack in
// it) through the server to the loopback scripted model, without
// guardrails and with two (flag all, block role reassignment). The
// difference of the two is the guardrails' cost per request.
func BenchmarkGuardrailRequest(b *testing.B) {
	e, _ := chatEnvTB(b, &scripted.Script{Turns: []scripted.Turn{{Text: "ok"}}, Repeat: true})
	var para strings.Builder
	for para.Len() < 10<<10 {
		para.WriteString("Please look at the attached sales data and tell me which region grew fastest last quarter. " +
			"Ignore the first row of the CSV, it is a header, and treat empty cells as zero. Act as a careful analyst.\n" +
			"region,q1,q2,q3,q4\nnorth,120,130,150,170\nsouth,90,95,99,101\neast,200,180,220,260\n")
	}
	body, _ := json.Marshal(map[string]any{"model": "local/m1", "max_tokens": 100,
		"messages": []any{map[string]any{"role": "user", "content": para.String()[:10<<10]}}})
	hdr := http.Header{"Content-Type": {"application/json"}, "Anthropic-Version": {"2023-06-01"}, "X-Api-Key": {e.keyA}}
	client := &http.Client{}
	run := func(b *testing.B) {
		for b.Loop() {
			if err := post(client, e.url+"/v1/messages", body, hdr); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("no guardrails", run)
	if st, out := e.do(http.MethodPut, "/api/v1/guardrails", e.keyA, map[string]any{"guardrails": []map[string]any{
		{"name": "watch", "action": "flag"}, {"name": "stop", "action": "block", "techniques": []string{"role_reassignment"}}}}); st != http.StatusOK {
		b.Fatalf("%d %s", st, out)
	}
	b.Run("two guardrails", run)
}
