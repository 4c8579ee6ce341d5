package testenv

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
)

// Shared is a server that a test binary starts once, on first use, and
// shares between its tests (a PostgreSQL cluster, an S3 server). A server
// that failed to start fails every test that asks for it, with the same
// error, rather than being started again by each.
type Shared[T any] struct {
	mu      sync.Mutex
	v       T
	err     error
	started bool
}

// Get returns the server, starting it with start on first use; what names
// it in a failure.
func (s *Shared[T]) Get(t testing.TB, what string, start func() (T, error)) T {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.v, s.err = start()
		s.started = true
	}
	if s.err != nil {
		t.Fatalf("%s: %v", what, s.err)
	}
	return s.v
}

// Stop stops the server with stop, if one was started; later Gets fail.
func (s *Shared[T]) Stop(stop func(T) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.err != nil {
		return nil
	}
	err := stop(s.v)
	var zero T
	s.v, s.err = zero, errors.New("the shared server was stopped")
	return err
}

// A Supervisor is a shell script that runs a server and stops it, and
// cleans up after it, once its standard input closes: when Stop is called,
// or when the test binary exits however it exits (the pipe's write end
// closes with the process), so no server outlives its tests.
type Supervisor struct {
	stdin *os.File
	cmd   *exec.Cmd
}

// Supervise starts script (run by /bin/sh in dir with env added to this
// process's environment, as cred when not nil) in its own process group,
// so that a Ctrl-C of the tests reaches it only through the closed pipe,
// after which it cleans up.
func Supervise(script, dir string, env []string, cred *syscall.Credential) (*Supervisor, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = r // a file, not a reader: no copying goroutine
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &Supervisor{stdin: w, cmd: cmd}, nil
}

// Stop closes the script's input and waits for it to finish; stopping a
// stopped (or nil) supervisor does nothing.
func (s *Supervisor) Stop() error {
	if s == nil || s.cmd == nil {
		return nil
	}
	s.stdin.Close()
	err := s.cmd.Wait()
	s.cmd = nil
	return err
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
