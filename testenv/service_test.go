package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestSharedStartsOnce(t *testing.T) {
	var s Shared[int]
	starts := 0
	start := func() (int, error) { starts++; return 7, nil }
	for range 3 {
		if v := s.Get(t, "svc", start); v != 7 {
			t.Fatalf("Get = %d, want 7", v)
		}
	}
	if starts != 1 {
		t.Fatalf("started %d times, want once", starts)
	}
	stopped := 0
	if err := s.Stop(func(int) error { stopped++; return nil }); err != nil || stopped != 1 {
		t.Fatalf("Stop: %v, stopped %d times", err, stopped)
	}
	if err := s.Stop(func(int) error { stopped++; return nil }); err != nil || stopped != 1 {
		t.Fatalf("a second Stop stopped again: %v, %d", err, stopped)
	}
}

// A server that failed to start fails every later Get with its error,
// without starting it again.
func TestSharedRemembersFailure(t *testing.T) {
	var s Shared[int]
	starts := 0
	for range 2 {
		ft := &fatalRecorder{TB: t}
		func() {
			defer func() { recover() }()
			s.Get(ft, "svc", func() (int, error) { starts++; return 0, errors.New("no port") })
		}()
		if ft.msg != "svc: no port" {
			t.Fatalf("failure = %q", ft.msg)
		}
	}
	if starts != 1 {
		t.Fatalf("started %d times, want once", starts)
	}
}

type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}

// Closing the supervisor's input is what stops the script: it runs its
// cleanup and exits, and Stop waits for that.
func TestSupervisorStopsOnClosedInput(t *testing.T) {
	dir := t.TempDir()
	done := filepath.Join(dir, "done")
	s, err := Supervise(`read -r _ || true; echo "$WORD" > done`, dir, []string{"WORD=bye"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(done); err == nil {
		t.Fatal("the script finished before its input closed")
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(done); err != nil || string(b) != "bye\n" {
		t.Fatalf("cleanup output %q, %v", b, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	var none *Supervisor
	if err := none.Stop(); err != nil {
		t.Fatalf("nil Stop: %v", err)
	}
}
