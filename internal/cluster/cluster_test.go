package cluster

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/sqlstore"
	"github.com/shellgate/shellgate/sandbox"
)

// clock is a settable clock shared by the nodes of a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestNewValidates(t *testing.T) {
	st, err := sqlstore.OpenSQLite(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, cfg := range []Config{
		{URL: "http://h:1", Nodes: st.Nodes()},
		{ID: "a", URL: "h:1", Nodes: st.Nodes()},
		{ID: "a", URL: "ftp://h", Nodes: st.Nodes()},
		{ID: "a", URL: "http://h:1"},
		{ID: "a", URL: "http://h:1", Nodes: st.Nodes(), Heartbeat: time.Second, Window: time.Second},
	} {
		if _, err := New(t.Context(), cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		}
	}
}

// Route and the archive wrapper on a real store (SQLite), with a clock the
// test moves: proxy to a live holder, serve here otherwise, 503 for a
// dead holder without an archive; a wake claims, a sleep releases, a
// wake against a live holder is refused as busy.
func TestRouteAndClaims(t *testing.T) {
	for _, portable := range []bool{true, false} {
		t.Run(map[bool]string{true: "archive", false: "no archive"}[portable], func(t *testing.T) {
			st, err := sqlstore.OpenSQLite(t.Context(), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
			mk := func(id string) *Node {
				n, err := New(t.Context(), Config{ID: id, URL: "http://" + id + ":8080", Nodes: st.Nodes(), Portable: portable, Now: clk.now})
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			a, b := mk("a"), mk("b")
			c, err := st.Containers().Create(t.Context(), store.Container{Scope: store.Scope{Account: "x", Workspace: "y"}, Name: "c",
				Status: store.StatusRunning, CreatedAt: clk.now(), LastActiveAt: clk.now(), NetworkPolicy: []byte(`{"type":"disabled"}`)})
			if err != nil {
				t.Fatal(err)
			}
			route := func(n *Node, want Where) Route {
				t.Helper()
				r, err := n.Route(t.Context(), c.ID)
				if err != nil || r.Where != want {
					t.Fatalf("route at %s: %+v %v; want %v", n.ID(), r, err, want)
				}
				return r
			}
			route(a, Local)
			var inner sandbox.HomeArchive
			if portable {
				inner = &countingArchive{}
			}
			img := filepath.Join(t.TempDir(), "home.img")
			os.WriteFile(img, []byte("home"), 0o600)
			arA, arB := a.Archive(inner), b.Archive(inner)
			if err := arA.Restore(t.Context(), c.ID, img); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			if r := route(b, Proxy); r.Node != "a" || r.URL != "http://a:8080" {
				t.Fatalf("%+v", r)
			}
			if err := arB.Restore(t.Context(), c.ID, img); !errors.Is(err, sandbox.ErrBusy) {
				t.Fatalf("wake on b while a holds it: %v", err)
			}
			// a dies (b keeps beating).
			clk.add(DefaultWindow + time.Second)
			b.Beat(t.Context())
			if portable {
				route(b, Local)
				if err := arB.Restore(t.Context(), c.ID, img); err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("takeover: %v", err)
				}
				// a comes back and sleeps its copy: not archived over b's.
				a.Beat(t.Context())
				if err := arA.Archive(t.Context(), c.ID, img); err != nil {
					t.Fatal(err)
				}
				if inner.(*countingArchive).archived != 0 {
					t.Fatal("a stale holder archived its copy")
				}
				if err := arB.Archive(t.Context(), c.ID, img); err != nil || inner.(*countingArchive).archived != 1 {
					t.Fatalf("b's sleep: %v", err)
				}
				route(a, Local) // released
			} else {
				if r := route(b, Unavailable); r.Node != "a" {
					t.Fatalf("%+v", r)
				}
				if err := arB.Restore(t.Context(), c.ID, img); !errors.Is(err, sandbox.ErrBusy) {
					t.Fatalf("without an archive a dead holder keeps the container: %v", err)
				}
				// A sleep without an archive keeps the container on a.
				a.Beat(t.Context())
				if err := arA.Archive(t.Context(), c.ID, img); err != nil {
					t.Fatal(err)
				}
				route(b, Proxy)
			}
			if err := arA.Delete(t.Context(), c.ID, img); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
		})
	}
}

// countingArchive counts archives and has nothing to restore: the
// wrapper's decisions are what is under test here (the real archive over
// versitygw is in internal/server's TestReplicas).
type countingArchive struct {
	archived int
}

func (d *countingArchive) Archive(_ context.Context, name, imagePath string) error {
	d.archived++
	return nil
}
func (d *countingArchive) Restore(context.Context, string, string) error { return fs.ErrNotExist }
func (d *countingArchive) Delete(context.Context, string, string) error  { return fs.ErrNotExist }
