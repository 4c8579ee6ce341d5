package server

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the admin connection that kills the replicas' ones

	"github.com/shellgate/shellgate/internal/store"
)

// The database connections die mid-traffic (a PostgreSQL restart or
// failover, here pg_terminate_backend of every backend but the killer's):
// the requests after it succeed on new connections, and every call
// answered 200 is billed exactly once. A call whose bill could not be
// written is not answered 200.
func TestReplicasDatabaseConnectionLoss(t *testing.T) {
	cl := newTestCluster(t, false)
	a, b := cl.replica(t, "node-a"), cl.replica(t, "node-b")
	key := a.keyA
	ca, cb := a.create(key, "on-a"), b.create(key, "on-b")
	admin, err := sql.Open("pgx", cl.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	admin.SetMaxOpenConns(1)
	kill := func() int {
		var n int
		if err := admin.QueryRowContext(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	execOnce := func(r *replica, ref, cmd string) (int, string) {
		body := fmt.Sprintf(`{"commands":[%q]}`, cmd)
		req, _ := http.NewRequest("POST", r.url+"/api/v1/containers/"+ref+"/exec", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Both containers awake, each on its replica, before the traffic.
	for _, x := range []struct {
		r   *replica
		ref string
	}{{a, "on-a"}, {b, "on-b"}} {
		if st, body := execOnce(x.r, x.ref, "true"); st != 200 {
			t.Fatalf("%d %s", st, body)
		}
	}
	var mu sync.Mutex
	answered := map[string]int{} // container → calls answered 200
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, x := range []struct {
		r   *replica
		ref string
		id  string
	}{{a, "on-a", ca.ID}, {b, "on-b", cb.ID}} {
		answered[x.id] = 1
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				st, body := execOnce(x.r, x.ref, "echo "+fmt.Sprint(i))
				mu.Lock()
				if st == 200 {
					answered[x.id]++
				} else {
					failures = append(failures, fmt.Sprintf("%s: %d %s", x.ref, st, body))
				}
				mu.Unlock()
			}
		})
	}
	killed := 0
	for range 5 {
		time.Sleep(200 * time.Millisecond)
		killed += kill()
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if killed == 0 {
		t.Fatal("no backend was terminated")
	}
	for _, f := range failures {
		// A request may fail while its connection dies, but visibly: an
		// error status with a message, never a 200.
		if !strings.Contains(f, `"message"`) {
			t.Errorf("a failure without an error envelope: %s", f)
		}
	}
	t.Logf("%d backends terminated in 5 rounds; answered 200: %v; failed visibly: %d %q", killed, answered, len(failures), failures)
	// The requests after it all succeed.
	kill()
	for i := range 10 {
		for _, x := range []struct {
			r   *replica
			ref string
			id  string
		}{{a, "on-a", ca.ID}, {b, "on-b", cb.ID}} {
			if st, body := execOnce(x.r, x.ref, "true"); st != 200 {
				t.Fatalf("request %d after the connections died: %d %s", i, st, body)
			}
			answered[x.id]++
		}
	}
	// Every call answered 200 has its one usage row; none has two.
	a.srv.WaitCalls(t.Context())
	b.srv.WaitCalls(t.Context())
	byC, err := a.st.Usage().ByContainer(t.Context(), store.Scope{Account: "acme", Workspace: "a"}, time.Time{}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, u := range byC {
		got[u.ContainerID] += int(u.Events)
	}
	for id, n := range answered {
		if got[id] != n {
			t.Errorf("container %s: %d usage rows for %d calls answered 200", id, got[id], n)
		}
	}
}
