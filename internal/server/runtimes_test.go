package server

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/sandbox"
)

// TestRuntimes runs an exec call through HTTP on each OCI runtime.
func TestRuntimes(t *testing.T) {
	for _, rt := range []string{"runsc", "crun", "runc"} {
		t.Run(rt, func(t *testing.T) {
			e := newEnv(t, rt, "busybox")
			c := e.create(e.keyA, "rt-"+rt)
			r := e.exec(e.keyA, c.ID, "echo hello from sandbox; id -u", "echo kept > f", "cat f")
			if !strings.HasPrefix(r.Output[0].Stdout, "hello from sandbox\n") || r.Output[2].Stdout != "kept\n" {
				t.Fatalf("%+v", r.Output)
			}
			if uid := strings.TrimSpace(strings.TrimPrefix(r.Output[0].Stdout, "hello from sandbox\n")); uid == "0" {
				t.Fatalf("commands run as root in the sandbox")
			}
			if e.mgr.Runtime() != rt {
				t.Fatalf("manager runtime %s", e.mgr.Runtime())
			}
			if st, b := e.do("DELETE", "/api/v1/containers/"+c.ID, e.keyA, nil); st != http.StatusOK {
				t.Fatalf("delete: %d %s", st, b)
			}
			if _, err := e.mgr.Status(c.ID); !errors.Is(err, sandbox.ErrNotFound) {
				t.Fatalf("after delete: %v", err)
			}
		})
	}
}

// TestPandasCSV is the README's curl sequence on the default image: a
// pandas one-liner writes a CSV, the next call reads it back.
func TestPandasCSV(t *testing.T) {
	e := newEnv(t, "crun", "default")
	e.create(e.keyA, "csv")
	r := e.exec(e.keyA, "csv",
		`python3 -c "import pandas as pd; pd.DataFrame({'region': ['north', 'south', 'north'], 'revenue': [7.5, 10.0, 20.0]}).to_csv('sales.csv', index=False)"`,
	)
	if o := r.Output[0]; *o.Outcome.ExitCode != 0 {
		t.Fatalf("write: %+v", o)
	}
	r = e.exec(e.keyA, "csv",
		`python3 -c "import pandas as pd; df = pd.read_csv('sales.csv'); print(df[df.region == 'north'].revenue.sum())"`)
	if o := r.Output[0]; o.Stdout != "27.5\n" {
		t.Fatalf("read: %+v", o)
	}
}
