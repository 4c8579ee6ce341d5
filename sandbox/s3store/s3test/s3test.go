// Package s3test runs a real S3-compatible server for tests: versitygw
// (scripts/setup-host.sh installs it from the Go module proxy), serving
// the posix backend over a temporary directory on a free loopback port,
// with random root credentials. One server is started per test binary, on
// first use; each test gets its own bucket on it.
//
//	cfg := s3test.NewBucket(t) // s3store.Config with endpoint, bucket, keys
//	st, err := s3store.Open(ctx, cfg)
//
// Like pgtest, the server runs under a small shell that reads its stdin, a
// pipe this process holds: when the test binary exits, however it exits,
// the shell stops versitygw and removes the directory.
//
// Without versitygw installed, the test is skipped, or fails under
// SHELLGATE_TEST_STRICT=1 (testenv.Missing).
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/shellgate/shellgate/sandbox/s3store"
	"github.com/shellgate/shellgate/testenv"
)

// Server is a running versitygw.
type Server struct {
	Dir       string // the served directory's parent (data/, log)
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string

	sup *testenv.Supervisor
}

var shared testenv.Shared[*Server]

// Bin is the versitygw binary: on PATH, else /usr/local/bin/versitygw;
// "" without one.
func Bin() string {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/local/bin/versitygw"); err == nil {
		return "/usr/local/bin/versitygw"
	}
	return ""
}

// Shared returns the test binary's server, starting it on first use.
func Shared(t testing.TB) *Server {
	t.Helper()
	bin := Bin()
	if bin == "" {
		testenv.Missing(t, "versitygw is not installed (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0, or scripts/setup-host.sh)")
	}
	return shared.Get(t, "s3test", func() (*Server, error) { return Start(bin) })
}

// Open opens cfg's store for t, closed when t ends.
func Open(t testing.TB, cfg s3store.Config) *s3store.Store {
	t.Helper()
	s, err := s3store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// NewBucket creates an empty bucket on the shared server for t and
// returns a Config for it (TempDir: t's temporary directory).
func NewBucket(t testing.TB) s3store.Config {
	t.Helper()
	return Shared(t).NewBucket(t)
}

// NewBucket creates an empty bucket on s for t.
func (s *Server) NewBucket(t testing.TB) s3store.Config {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "t-" + hex.EncodeToString(b[:])
	c := s.client()
	defer c.Options().HTTPClient.(*http.Client).CloseIdleConnections()
	if _, err := c.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatalf("s3test: creating bucket: %v", err)
	}
	// The bucket's directory goes with the server; a test's objects are
	// small, so no cleanup is needed in between.
	return s3store.Config{Bucket: name, Endpoint: s.Endpoint, Region: "us-east-1",
		AccessKey: s.AccessKey, SecretKey: s.SecretKey, TempDir: t.TempDir()}
}

func (s *Server) client() *s3.Client {
	creds := aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey}
	return s3.New(s3.Options{
		Region: "us-east-1", UsePathStyle: true, BaseEndpoint: &s.Endpoint,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return creds, nil }),
		HTTPClient:  &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
	})
}

const supervisor = `
"$VGW_BIN" --port "127.0.0.1:$VGW_PORT" posix "$VGW_DIR/data" >"$VGW_DIR/log" 2>&1 &
pid=$!
read -r _ || true
kill -TERM "$pid" 2>/dev/null
wait "$pid"
rm -rf "$VGW_DIR"
`

// Start runs versitygw on a new temporary directory and waits until it
// answers.
func Start(bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "shellgate-s3-")
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var k, sk [16]byte
	rand.Read(k[:])
	rand.Read(sk[:])
	port, err := testenv.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Dir: dir, Endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
		AccessKey: "AK" + hex.EncodeToString(k[:8]), SecretKey: hex.EncodeToString(sk[:])}
	s.sup, err = testenv.Supervise(supervisor, dir, []string{"VGW_BIN=" + bin, "VGW_DIR=" + dir, "VGW_PORT=" + strconv.Itoa(port),
		"ROOT_ACCESS_KEY=" + s.AccessKey, "ROOT_SECRET_KEY=" + s.SecretKey}, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := s.client()
	defer c.Options().HTTPClient.(*http.Client).CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.ListBuckets(ctx, &s3.ListBucketsInput{})
		cancel()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			s.Stop()
			return nil, fmt.Errorf("versitygw did not start on port %d: %v\n%s", port, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() error { return s.sup.Stop() }
