package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Serve runs the agent: it reads requests from in, writes frames to out and
// returns when in is closed (the host went away), after killing every
// process it started. It must run as PID 1 of its own PID namespace: the
// process-tree kill is kill(-1, SIGKILL), which from PID 1 reaches exactly
// the sandbox's other processes, however they detached (setsid, double fork,
// nohup).
func Serve(in io.Reader, out io.Writer) error {
	if os.Getpid() != 1 {
		return errors.New("agent: must run as PID 1 of a PID namespace")
	}
	// Commands run as the agent's own user. Not dumpable, the agent's
	// /proc/1/fd (the pipes to the host), memory and ptrace are closed to
	// them: they cannot forge frames or drive the agent.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("agent: prctl(PR_SET_DUMPABLE): %w", err)
	}
	// Every command's stdin is /dev/null, opened once.
	devnull, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("agent: open %s: %w", os.DevNull, err)
	}
	s := &server{out: out, queue: make(chan job, 128), reaped: make(chan struct{}, 1), devnull: devnull, env: os.Environ()}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	// PID 1 ignores signals it has no handler for; make TERM and INT from
	// the runtime ("kill") end the sandbox.
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go s.reap(sigs)
	go s.worker()
	if err := s.send(frameReady, 0, mustJSON(Hello{Version: ProtocolVersion, PID: os.Getpid()})); err != nil {
		return err
	}
	var buf []byte
	for {
		typ, id, payload, err := readFrame(in, buf)
		if err != nil {
			s.shutdown()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		buf = payload[:0]
		switch typ {
		case frameExec:
			var req ExecRequest
			if err := json.Unmarshal(payload, &req); err != nil {
				s.send(frameDone, id, mustJSON(ExecResult{ExitCode: -1, Error: "bad request: " + err.Error()}))
				continue
			}
			s.enqueue(job{id: id, req: req})
		case frameCancel:
			s.cancel(id)
		}
	}
}

type job struct {
	id  uint32
	req ExecRequest
}

type server struct {
	wmu sync.Mutex // serializes frames on out
	out io.Writer

	queue chan job

	mu       sync.Mutex
	mainPID  int                 // the running command's process, 0 if none
	status   *syscall.WaitStatus // its status once reaped
	exited   chan struct{}       // closed when mainPID is reaped
	running  uint32              // id of the running job
	canceled map[uint32]bool     // ids canceled before or while running
	reaped   chan struct{}       // pulsed after each reaping round

	devnull int      // read-only /dev/null, every command's stdin
	env     []string // every command's environment: the agent's own
}

func (s *server) send(typ byte, id uint32, payload ...[]byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return writeFrame(s.out, typ, id, payload...)
}

func (s *server) enqueue(j job) {
	select {
	case s.queue <- j:
	default:
		s.send(frameDone, j.id, mustJSON(ExecResult{ExitCode: -1, Error: "agent: too many queued commands"}))
	}
}

func (s *server) cancel(id uint32) {
	s.mu.Lock()
	if s.canceled == nil {
		s.canceled = map[uint32]bool{}
	}
	s.canceled[id] = true
	running := s.mainPID != 0 && s.running == id
	s.mu.Unlock()
	if running {
		killAll()
	}
}

// reap collects every exited child: the commands and whatever orphans the
// kernel re-parents to PID 1.
func (s *server) reap(sigs chan os.Signal) {
	for sig := range sigs {
		if sig == syscall.SIGTERM || sig == syscall.SIGINT {
			killAll()
			os.Exit(0)
		}
		s.reapAll()
		select {
		case s.reaped <- struct{}{}:
		default:
		}
	}
}

// reapAll collects every exited child without waiting and reports whether
// it found one; the running command's status is kept.
func (s *server) reapAll() (any bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return any
		}
		any = true
		s.mu.Lock()
		if pid == s.mainPID && s.status == nil {
			st := ws
			s.status = &st
			close(s.exited)
		}
		s.mu.Unlock()
	}
}

func (s *server) worker() {
	for j := range s.queue {
		s.mu.Lock()
		canceled := s.canceled[j.id]
		delete(s.canceled, j.id)
		s.mu.Unlock()
		var res ExecResult
		if canceled {
			res = ExecResult{ExitCode: -1, Canceled: true}
		} else {
			res = s.run(j)
		}
		s.send(frameDone, j.id, mustJSON(res))
	}
}

// capture reads one stream to EOF, forwarding the first max bytes as Output
// frames and counting the rest.
//
// r is a blocking pipe read end used with plain read(2) rather than an
// os.File: Go's poller would add an EAGAIN read, epoll_ctl calls and an
// epoll wait per stream and command, and every syscall is a trip into the
// sentry under gVisor.
func (s *server) capture(id uint32, stream byte, r int, max int, total *int64, done *sync.WaitGroup) {
	defer done.Done()
	defer unix.Close(r)
	buf := make([]byte, 32<<10)
	kept := 0
	for {
		n, err := unix.Read(r, buf)
		if err == unix.EINTR {
			continue
		}
		if n > 0 {
			*total += int64(n)
			if keep := min(n, max-kept); keep > 0 {
				kept += keep
				s.send(frameOutput, id, []byte{stream}, buf[:keep])
			}
		}
		if err != nil || n <= 0 {
			return
		}
	}
}

func (s *server) run(j job) (res ExecResult) {
	req := j.req
	if len(req.Shell) == 0 {
		req.Shell = []string{"/bin/sh", "-lc"}
	}
	if req.MaxBytes <= 0 {
		req.MaxBytes = 64 << 10
	}
	argv := append(append([]string(nil), req.Shell...), req.Command)
	var outP, errP [2]int
	if err := unix.Pipe2(outP[:], unix.O_CLOEXEC); err != nil {
		return ExecResult{ExitCode: -1, Error: err.Error()}
	}
	if err := unix.Pipe2(errP[:], unix.O_CLOEXEC); err != nil {
		unix.Close(outP[0])
		unix.Close(outP[1])
		return ExecResult{ExitCode: -1, Error: err.Error()}
	}
	outR, outW, errR, errW := outP[0], outP[1], errP[0], errP[1]
	attr := &syscall.ProcAttr{
		Dir:   req.Dir,
		Env:   s.env,
		Files: []uintptr{uintptr(s.devnull), uintptr(outW), uintptr(errW)},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	}
	s.mu.Lock()
	exited := make(chan struct{})
	s.exited, s.status, s.running = exited, nil, j.id
	pid, err := syscall.ForkExec(argv[0], argv, attr)
	if err == nil {
		s.mainPID = pid
	}
	s.mu.Unlock()
	unix.Close(outW)
	unix.Close(errW)
	if err != nil {
		unix.Close(outR)
		unix.Close(errR)
		return ExecResult{ExitCode: 127, Error: "start " + argv[0] + ": " + err.Error()}
	}

	var readers sync.WaitGroup
	readers.Add(2)
	go s.capture(j.id, Stdout, outR, req.MaxBytes, &res.StdoutBytes, &readers)
	go s.capture(j.id, Stderr, errR, req.MaxBytes, &res.StderrBytes, &readers)

	var timeout <-chan time.Time
	if req.TimeoutMs > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutMs) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-exited:
	case <-timeout:
		res.TimedOut = true
	}
	// Whatever the command left behind dies with it: background jobs,
	// setsid'ed daemons and double-forked orphans alike.
	killAll()
	s.waitIdle()
	<-exited
	readers.Wait()

	s.mu.Lock()
	ws := *s.status
	s.mainPID = 0
	if s.canceled[j.id] {
		res.Canceled = true
		delete(s.canceled, j.id)
	}
	s.mu.Unlock()
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		res.Signal = int(ws.Signal())
		res.ExitCode = 128 + res.Signal
	}
	return res
}

// waitIdle returns once no process but the agent is left. It returns at
// once when nothing is left (the common case: one kill(-1, 0)), reaps what
// it killed itself rather than waiting for SIGCHLD to go round the signal
// goroutines, and only then waits, for a reaping round or 1 ms: killed
// processes take a moment to become reapable zombies.
func (s *server) waitIdle() {
	for {
		if err := unix.Kill(-1, 0); err == unix.ESRCH {
			return
		}
		killAll()
		if s.reapAll() {
			continue
		}
		select {
		case <-s.reaped:
		case <-time.After(time.Millisecond):
		}
	}
}

// killAll sends SIGKILL to every process of the sandbox except the agent.
func killAll() { unix.Kill(-1, unix.SIGKILL) }

func (s *server) shutdown() {
	killAll()
	s.waitIdle()
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
