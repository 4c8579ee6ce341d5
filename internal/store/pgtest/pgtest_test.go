package pgtest

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A server of its own: it answers on loopback with the password only, runs
// as the postgres user (as root), each test's database is its own and is
// dropped after the test, and Stop removes the cluster.
func TestServer(t *testing.T) {
	bin := BinDir()
	if bin == "" {
		Shared(t) // skips, or fails under SHELLGATE_TEST_STRICT=1
	}
	s, err := Start(bin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	var addr, user string
	err = c.QueryRow(ctx, `SELECT current_setting('listen_addresses'), (SELECT usename FROM pg_user WHERE usesysid = (SELECT datdba FROM pg_database WHERE datname = 'template1'))`).Scan(&addr, &user)
	c.Close(ctx)
	if err != nil || addr != "127.0.0.1" || user != "postgres" {
		t.Errorf("listen_addresses %q, owner %q, %v", addr, user, err)
	}
	wrong := *s
	wrong.Password = "not-the-password"
	if c, err := pgx.Connect(ctx, wrong.DSN("postgres")); err == nil {
		c.Close(ctx)
		t.Errorf("connected with a wrong password")
	}
	if os.Geteuid() == 0 {
		st, err := os.Stat(filepath.Join(s.Dir, "data"))
		if err != nil {
			t.Fatal(err)
		}
		if uid := st.Sys().(*syscall.Stat_t).Uid; uid == 0 {
			t.Errorf("the cluster belongs to root")
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Fatalf("%s after Stop: %v", s.Dir, err)
	}
}

func TestNewDatabase(t *testing.T) {
	var dsn string
	t.Run("uses", func(t *testing.T) {
		dsn = NewDatabase(t)
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), `CREATE TABLE x (a int)`); err != nil {
			t.Fatal(err)
		}
	})
	// Dropped at the end of the test that made it.
	if c, err := pgx.Connect(context.Background(), dsn); err == nil {
		c.Close(context.Background())
		t.Fatal("the test's database outlived it")
	}
	if err := StopShared(); err != nil {
		t.Fatal(err)
	}
}
