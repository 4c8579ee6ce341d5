// Package pgtest runs a real PostgreSQL server for tests: Debian's
// `postgresql` package (scripts/setup-host.sh installs it), as an
// unprivileged throwaway cluster in a temporary directory, listening on a
// free loopback port with password authentication. One server is started
// per test binary, on first use; each test gets its own database on it.
//
//	dsn := pgtest.NewDatabase(t) // postgres://postgres:...@127.0.0.1:PORT/t_...?sslmode=disable
//	st, err := sqlstore.OpenPostgres(ctx, dsn)
//
// The server runs under a small shell that reads its stdin, a pipe this
// process holds: when the test binary exits, however it exits, the pipe
// closes and the shell stops PostgreSQL and removes the directory, so no
// server outlives its tests. As root, the cluster belongs to the
// `postgres` system user (PostgreSQL refuses to run as root).
//
// Without PostgreSQL installed, the test is skipped, or fails under
// SHELLGATE_TEST_STRICT=1 (testenv.Missing).
//
// # How it works
//
//   - `internal/store/pgtest` runs that PostgreSQL for tests: Debian's
//     `postgresql` binaries, `initdb` in a temporary directory owned by the
//     `postgres` user (PostgreSQL refuses root), a free port on 127.0.0.1,
//     password auth, fsync off; one server per test binary, one database per
//     test (dropped after it). The server runs under a shell that reads a pipe
//     the test binary holds, so it stops and its directory goes when the binary
//     exits, however it exits.
package pgtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shellgate/shellgate/testenv"
)

// Server is a running PostgreSQL cluster.
type Server struct {
	Dir      string // the cluster's directory (data/, the socket, log)
	Port     int    // on 127.0.0.1
	User     string // the superuser, "postgres"
	Password string

	sup *testenv.Supervisor
}

// DSN is the URL of database db on the server, as the superuser.
func (s *Server) DSN(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(s.User, s.Password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

var shared testenv.Shared[*Server]

// Shared returns the test binary's server, starting it on first use
// (a few seconds: initdb, then the server). A server that failed to start
// fails every test that asks for it.
func Shared(t testing.TB) *Server {
	t.Helper()
	bin := BinDir()
	if bin == "" {
		testenv.Missing(t, "PostgreSQL is not installed (/usr/lib/postgresql/*/bin/postgres; apt-get install postgresql, or scripts/setup-host.sh)")
	}
	return shared.Get(t, "pgtest", func() (*Server, error) { return Start(bin) })
}

// NewDatabase creates an empty database on the shared server for t, dropped
// when t ends, and returns its DSN.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return Shared(t).NewDatabase(t)
}

// NewDatabase creates an empty database on s for t, dropped when t ends,
// and returns its DSN.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	var b [8]byte
	rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	if err := s.admin(context.Background(), `CREATE DATABASE `+name); err != nil {
		t.Fatalf("pgtest: creating database: %v", err)
	}
	t.Cleanup(func() {
		// FORCE ends the connections of handles a test left open.
		if err := s.admin(context.Background(), `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return s.DSN(name)
}

// admin runs one statement as the superuser in the postgres database.
func (s *Server) admin(ctx context.Context, q string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, q)
	return err
}

// BinDir is the newest installed PostgreSQL's bin directory (Debian's
// layout, /usr/lib/postgresql/VERSION/bin), or "" without one.
func BinDir() string {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	if len(found) == 0 {
		return ""
	}
	return filepath.Dir(found[0])
}

func version(postgresBin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(postgresBin))))
	return v
}

// supervisor runs the server and, once its stdin closes, stops it (fast
// shutdown) and removes the cluster's directory.
const supervisor = `
"$PGBIN/postgres" -D "$PGDIR/data" -p "$PGPORT" -k "$PGDIR" -c listen_addresses=127.0.0.1 \
	-c max_connections=200 $PGFLAGS \
	>"$PGDIR/log" 2>&1 &
pid=$!
read -r _ || true
kill -INT "$pid" 2>/dev/null
wait "$pid"
rm -rf "$PGDIR"
`

// Options change how Start runs the server.
type Options struct {
	// Durable keeps PostgreSQL's default durability (fsync, synchronous
	// commit, full page writes), for benchmarks that compare it with a
	// store that syncs every commit. Tests run without: faster, and a
	// throwaway cluster needs no crash safety.
	Durable bool
}

// Start initializes a cluster in a new temporary directory and starts a
// server on it, waiting until it accepts connections. Stop it with Stop,
// or let the process exit.
func Start(bin string) (*Server, error) { return StartWith(bin, Options{}) }

// StartWith is Start with options.
func StartWith(bin string, o Options) (*Server, error) {
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "shellgate-pg-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Server, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	var pw [16]byte
	rand.Read(pw[:])
	s := &Server{Dir: dir, User: "postgres", Password: hex.EncodeToString(pw[:])}
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(s.Password+"\n"), 0o600); err != nil {
		return fail(err)
	}
	if cred != nil {
		os.Chown(pwFile, int(cred.Uid), int(cred.Gid))
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", s.User,
		"--pwfile", pwFile, "--auth", "scram-sha-256", "--encoding", "UTF8", "--locale", "C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	os.Remove(pwFile)
	if s.Port, err = testenv.FreePort(); err != nil {
		return fail(err)
	}
	// On failure the supervisor has removed the directory.
	flags := "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	if o.Durable {
		flags = ""
	}
	if err := s.start(bin, cred, flags); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) start(bin string, cred *syscall.Credential, flags string) error {
	sup, err := testenv.Supervise(supervisor, s.Dir,
		[]string{"PGBIN=" + bin, "PGDIR=" + s.Dir, "PGPORT=" + strconv.Itoa(s.Port), "PGFLAGS=" + flags}, cred)
	if err != nil {
		return err
	}
	s.sup = sup
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(s.Dir, "log"))
		if time.Now().After(deadline) || bytes.Contains(log, []byte("database system is shut down")) {
			s.Stop()
			return fmt.Errorf("PostgreSQL did not start on port %d: %v\n%s", s.Port, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() error {
	if err := s.sup.Stop(); err != nil {
		return fmt.Errorf("PostgreSQL's supervisor: %w", err)
	}
	return nil
}

// StopShared stops the shared server, if one was started. A test binary
// need not call it (the server stops when the binary exits); call it where
// nothing may outlive the tests.
func StopShared() error { return shared.Stop((*Server).Stop) }

// credential is whom the cluster runs as: the postgres system user when
// this process is root, else this process's own user (nil).
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres system user (from the postgresql package) to own the cluster: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
