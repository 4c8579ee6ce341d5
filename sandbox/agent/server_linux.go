package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Options say whom the agent runs commands as and how many tasks they may
// have. cmd/shellgate-agent takes them as flags from the sandbox's spec.
type Options struct {
	// UID and GID run every command (supplementary groups: GID alone).
	// When they differ from the agent's own, the agent needs CAP_SETUID,
	// CAP_SETGID and CAP_KILL; negative means the agent's own.
	UID, GID int
	// Processes is the commands' RLIMIT_NPROC: the processes and threads
	// their user may have at once. The agent sets it on itself and every
	// command inherits it. 0 leaves the limit as it is.
	Processes int64
}

// agentCaps are all the capabilities the agent keeps: to hand each command
// its user and group, and to kill what the commands leave behind.
var agentCaps = []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_KILL}

// Serve runs the agent for one host: it reads requests from in, writes
// frames to out and returns when in is closed (the host went away), after
// killing every process it started. It must run as PID 1 of its own PID
// namespace: the process-tree kill is kill(-1, SIGKILL), which from PID 1
// reaches exactly the sandbox's other processes, however they detached
// (setsid, double fork, nohup).
//
// The agent is meant to run as a user of its own (uid 0 of the sandbox)
// and to start commands as opts.UID: then no command can signal, ptrace or
// read the agent, and the commands' RLIMIT_NPROC, counted per user, never
// counts the agent's own threads.
func Serve(in io.Reader, out io.Writer, opts Options) error {
	s, err := start(opts)
	if err != nil {
		return err
	}
	defer s.shutdown()
	return s.serve(in, out)
}

// start makes the agent's state, one per process, that every host served
// shares: the privileges dropped, the reaper, the one queue of commands and
// its worker.
func start(opts Options) (*server, error) {
	if os.Getpid() != 1 {
		return nil, errors.New("agent: must run as PID 1 of a PID namespace")
	}
	// Not dumpable, the agent's /proc/1/fd (the pipes to the host), memory,
	// environment and ptrace are closed to the commands: they cannot forge
	// frames or drive the agent.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("agent: prctl(PR_SET_DUMPABLE): %w", err)
	}
	cred, err := dropPrivileges(opts)
	if err != nil {
		return nil, err
	}
	if opts.Processes > 0 {
		lim := unix.Rlimit{Cur: uint64(opts.Processes), Max: uint64(opts.Processes)}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			return nil, fmt.Errorf("agent: setrlimit(RLIMIT_NPROC, %d): %w", opts.Processes, err)
		}
	}
	// Every command's stdin is /dev/null, opened once.
	devnull, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent: open %s: %w", os.DevNull, err)
	}
	s := &server{queue: make(chan job, 128), workerDone: make(chan struct{}), reaped: make(chan struct{}, 1),
		hosts: map[*host]bool{}, devnull: devnull, env: os.Environ(), cred: cred, nproc: opts.Processes}
	s.quiet = sync.NewCond(&s.mu)
	// Every signal is caught and, but for SIGCHLD, dropped: PID 1 must
	// survive whatever reaches it (commands cannot signal it at all when it
	// runs as another user; the host stops it with SIGKILL or by closing
	// its stdin). Caught rather than ignored: an ignored signal would stay
	// ignored in every command the agent starts, while caught ones are
	// reset to their defaults by exec.
	s.sigs = make(chan os.Signal, 16)
	signal.Notify(s.sigs)
	go s.reap(s.sigs)
	go s.worker()
	return s, nil
}

// serve serves one host on in and out until in ends; the host's commands,
// resident process and file requests end with it (leave).
func (s *server) serve(in io.Reader, out io.Writer) error {
	h, peers := s.join(out)
	defer s.leave(h)
	if err := h.send(frameReady, 0, mustJSON(Hello{Version: ProtocolVersion, PID: os.Getpid(), Files: true, Resident: true, Peers: &peers})); err != nil {
		return err
	}
	go h.tellPeers()
	var buf []byte
	for {
		typ, id, payload, err := readFrame(in, buf)
		if err != nil {
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
				h.send(frameDone, id, mustJSON(ExecResult{ExitCode: -1, Error: "bad request: " + err.Error()}))
				continue
			}
			s.enqueue(job{h: h, id: id, req: req})
		case frameCancel:
			if !h.cancelFile(id) {
				s.cancel(h, id)
			}
		case frameTimeout:
			s.expire(h, id)
		case frameHold:
			s.hold(h, id)
		case frameRelease:
			s.release(h)
		case frameFile:
			h.startFile(id, payload)
		case frameData:
			h.fileData(id, payload)
		}
	}
}

// dropPrivileges empties the bounding set (so that no command can ever
// gain a capability, even through a file capability or a setuid binary
// were no_new_privs missing) and keeps only agentCaps of the agent's own
// capabilities, on every thread. It returns the credential commands start
// with, nil to run them as the agent's own user.
func dropPrivileges(opts Options) (*syscall.Credential, error) {
	var cred *syscall.Credential
	if (opts.UID >= 0 && opts.UID != os.Getuid()) || (opts.GID >= 0 && opts.GID != os.Getgid()) {
		uid, gid := opts.UID, opts.GID
		if uid < 0 {
			uid = os.Getuid()
		}
		if gid < 0 {
			gid = os.Getgid()
		}
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid)}}
	}
	for c := uintptr(0); c <= 63; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0)
		if err != nil {
			break // past the last capability this kernel knows
		}
		if in == 1 {
			if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); errno != 0 {
				return nil, fmt.Errorf("agent: drop capability %d from the bounding set: %w", c, errno)
			}
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("agent: capget: %w", err)
	}
	var keep [2]uint32
	for _, c := range agentCaps {
		keep[c/32] |= 1 << (c % 32)
	}
	for i := range data {
		data[i].Permitted &= keep[i]
		data[i].Effective = data[i].Permitted
		data[i].Inheritable = 0
	}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return nil, fmt.Errorf("agent: capset: %w", errno)
	}
	if cred != nil {
		for _, c := range agentCaps {
			if data[c/32].Effective&(1<<(c%32)) == 0 {
				return nil, fmt.Errorf("agent: running as uid %d, it needs capability %d to run commands as uid %d", os.Getuid(), c, cred.Uid)
			}
		}
	}
	return cred, nil
}

type job struct {
	h   *host
	id  uint32
	req ExecRequest
}

// server is the agent's state shared by every host it serves: one queue
// of commands, run one at a time in the order they arrived, whichever
// host sent them.
type server struct {
	queue      chan job
	workerDone chan struct{} // closed when the worker has returned
	sigs       chan os.Signal

	mu    sync.Mutex
	hosts map[*host]bool // the hosts served
	// holder is the host holding the sandbox (frameHold), nil if none:
	// the other hosts' commands and file requests are refused (Held)
	// until it leaves or releases. quiet is signalled whenever what the
	// hosts have in progress changes (notePeers).
	holder *host
	quiet  *sync.Cond
	// cur is the host whose job the worker has taken (nil between jobs),
	// curDone closed once the worker is done with it.
	cur     *host
	curDone chan struct{}
	mainPID int                 // the running command's process, 0 if none
	status  *syscall.WaitStatus // its status once reaped
	exited  chan struct{}       // closed when mainPID is reaped
	running uint32              // id of the running job (cur's)
	reaped  chan struct{}       // pulsed after each reaping round
	// timeUp is closed when the running job's time is up (frameTimeout).
	timeUp chan struct{}
	// resident is the resident process (ExecRequest.Resident), 0 if none,
	// and residentOf the host that started it: killAll spares it and its
	// descendants while that host is served.
	resident   int
	residentOf *host

	devnull int                 // read-only /dev/null, every command's stdin
	env     []string            // every command's environment: the agent's own
	cred    *syscall.Credential // every command's user, nil: the agent's
	nproc   int64               // the commands' RLIMIT_NPROC, 0 if not set
}

// host is one host served: a connection (or the stdio pipes) and what it
// has asked for. Its fields but out and files are guarded by server.mu.
type host struct {
	s   *server
	wmu sync.Mutex // serializes frames on out
	out io.Writer

	// closed: the host is gone (leave); none of its commands starts any
	// more.
	closed   bool
	canceled map[uint32]bool // ids canceled before or while running
	// The host times its commands (frameTimeout): started is the id of
	// its last job the worker took, expired holds the ids whose time was
	// up while they waited in the queue (answered then).
	started uint32
	expired map[uint32]bool
	// active counts its command running and its file requests in
	// progress; peers is what it was last told of the other hosts, and
	// peersChanged pulses when that changed.
	active       int
	peers        Peers
	peersChanged chan struct{}
	left         chan struct{} // closed by leave

	files fileOps // file requests in progress
}

func (h *host) send(typ byte, id uint32, payload ...[]byte) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return writeFrame(h.out, typ, id, payload...)
}

// join adds a host writing to out and returns what it is first told of
// the others.
func (s *server) join(out io.Writer) (*host, Peers) {
	h := &host{s: s, out: out, peersChanged: make(chan struct{}, 1), left: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hosts[h] = true
	s.notePeers()
	return h, h.peers
}

// leave ends what host h started, before it returns: its queued commands
// are dropped (the worker skips them), its running command and its
// resident process are killed and reaped, and its file requests are
// canceled and waited for, so that nothing of a host gone runs beside the
// other hosts' commands or lands in the home after them. The other hosts'
// commands, queued or running, are not touched.
func (s *server) leave(h *host) {
	s.mu.Lock()
	h.closed = true
	delete(s.hosts, h)
	s.releaseLocked(h)
	if s.residentOf == h {
		res := s.resident
		s.resident, s.residentOf = 0, nil
		if s.cur != nil && s.cur != h {
			// Another host's command runs: only the resident's tree goes.
			for _, pid := range s.tree(res) {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
	var wait chan struct{}
	if s.cur == h || s.cur == nil {
		// Its command, if it has one, is what runs: the worker cannot
		// start another while s.mu is held. Nothing else runs but the
		// resident (another host's, spared).
		s.killAllLocked()
		if s.cur == h {
			wait = s.curDone
		}
	}
	s.notePeers()
	s.mu.Unlock()
	close(h.left)
	if wait != nil {
		<-wait // the worker has reaped it and killed what it left
	}
	h.endFiles(fileStopWait)
}

// notePeers tells each host, when it changed, how many other hosts there
// are and whether one of them has a command running or a file request in
// progress (Peers). Called with s.mu held.
func (s *server) notePeers() {
	s.quiet.Broadcast()
	total := 0
	for h := range s.hosts {
		total += h.active
	}
	for h := range s.hosts {
		p := Peers{Hosts: len(s.hosts) - 1, Busy: total > h.active}
		if p != h.peers {
			h.peers = p
			select {
			case h.peersChanged <- struct{}{}:
			default:
			}
		}
	}
}

// activity adds d to h's active count; a positive d is refused (false)
// while another host holds the sandbox.
func (s *server) activity(h *host, d int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d > 0 && s.holder != nil && s.holder != h {
		return false
	}
	h.active += d
	s.notePeers()
	return true
}

// othersActive tells whether a host but h has a command running or a
// file request in progress. Called with s.mu held.
func (s *server) othersActive(h *host) bool {
	for o := range s.hosts {
		if o != h && o.active > 0 {
			return true
		}
	}
	return false
}

// hold makes h the sandbox's holder (frameHold) and answers id once no
// other host has a command running or a file request in progress. From
// the frame on, until h leaves or releases, the other hosts' commands and
// file requests are refused (Held, ErrHeld): they do not run. A host
// archiving the home before the pod is deleted holds it, so that nothing
// another host does meanwhile is lost with the pod. A hold while another
// host holds is refused.
func (s *server) hold(h *host, id uint32) {
	s.mu.Lock()
	if s.holder != nil && s.holder != h {
		s.mu.Unlock()
		h.send(frameDone, id, mustJSON(ExecResult{ExitCode: -1, Error: ErrHeld.Error()}))
		return
	}
	s.holder = h
	s.mu.Unlock()
	go func() {
		s.mu.Lock()
		for s.holder == h && s.othersActive(h) {
			s.quiet.Wait()
		}
		held := s.holder == h
		s.mu.Unlock()
		if held {
			h.send(frameDone, id, mustJSON(ExecResult{}))
		}
	}()
}

// release ends h's hold, if it holds the sandbox.
func (s *server) release(h *host) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(h)
}

func (s *server) releaseLocked(h *host) {
	if s.holder != h {
		return
	}
	s.holder = nil
	s.quiet.Broadcast() // a hold waiting to be answered is over
}

// tellPeers sends h the latest Peers each time they changed, until h
// leaves. One goroutine per host: a host that reads slowly holds up only
// its own frames.
func (h *host) tellPeers() {
	for {
		select {
		case <-h.left:
			return
		case <-h.peersChanged:
		}
		h.s.mu.Lock()
		p := h.peers
		h.s.mu.Unlock()
		if h.send(framePeers, 0, mustJSON(p)) != nil {
			return
		}
	}
}

func (s *server) enqueue(j job) {
	select {
	case s.queue <- j:
	default:
		j.h.send(frameDone, j.id, mustJSON(ExecResult{ExitCode: -1, Error: "agent: too many queued commands"}))
	}
}

func (s *server) cancel(h *host, id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.canceled == nil {
		h.canceled = map[uint32]bool{}
	}
	h.canceled[id] = true
	if s.mainPID != 0 && s.cur == h && s.running == id {
		s.killAllLocked()
	}
}

// reap collects every exited child: the commands and whatever orphans the
// kernel re-parents to PID 1.
func (s *server) reap(sigs chan os.Signal) {
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			continue
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
		if pid == s.resident {
			s.resident, s.residentOf = 0, nil
		}
		s.mu.Unlock()
	}
}

// expire ends h's running command with this id as timed out, or answers
// its queued one as timed out at once (it never runs: the worker skips
// it), so that a host never waits past a command's time for the commands
// queued before it, another host's included. The host may send it for a
// command that has just ended: that one is past and the frame is dropped.
func (s *server) expire(h *host, id uint32) {
	s.mu.Lock()
	queued := false
	switch {
	case s.cur == h && id == h.started && s.timeUp != nil:
		close(s.timeUp)
		s.timeUp = nil
	case id > h.started && !h.expired[id]:
		if h.expired == nil {
			h.expired = map[uint32]bool{}
		}
		h.expired[id] = true
		queued = true
	}
	s.mu.Unlock()
	if queued {
		h.send(frameDone, id, mustJSON(ExecResult{ExitCode: -1, TimedOut: true,
			Error: "the command's time was up while it waited for the sandbox's commands before it; it did not run"}))
	}
}

func (s *server) worker() {
	defer close(s.workerDone)
	for j := range s.queue {
		h := j.h
		s.mu.Lock()
		if h.closed {
			s.mu.Unlock()
			continue // queued for a host that is gone: dropped unanswered
		}
		if s.holder != nil && h != s.holder {
			s.mu.Unlock()
			h.send(frameDone, j.id, mustJSON(ExecResult{ExitCode: -1, Held: true, Error: ErrHeld.Error()}))
			continue
		}
		canceled := h.canceled[j.id]
		delete(h.canceled, j.id)
		expired := h.expired[j.id]
		for id := range h.expired {
			if id <= j.id {
				delete(h.expired, id)
			}
		}
		h.started = j.id
		if expired {
			s.mu.Unlock()
			continue // answered when its time was up
		}
		if canceled {
			s.mu.Unlock()
			h.send(frameDone, j.id, mustJSON(ExecResult{ExitCode: -1, Canceled: true}))
			continue
		}
		timeUp, done := make(chan struct{}), make(chan struct{})
		s.cur, s.curDone, s.timeUp = h, done, timeUp
		h.active++
		s.notePeers()
		s.mu.Unlock()
		res := s.run(j, timeUp)
		h.send(frameDone, j.id, mustJSON(res))
		s.mu.Lock()
		s.cur, s.curDone, s.timeUp = nil, nil, nil
		h.active--
		s.notePeers()
		s.mu.Unlock()
		close(done)
	}
}

// capture reads one stream to EOF, forwarding the first max bytes as Output
// frames and counting the rest.
//
// r is a blocking pipe read end used with plain read(2) rather than an
// os.File: Go's poller would add an EAGAIN read, epoll_ctl calls and an
// epoll wait per stream and command, and every syscall is a trip into the
// sentry under gVisor.
func (s *server) capture(h *host, id uint32, stream byte, r int, max int, total *int64, done *sync.WaitGroup) {
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
				h.send(frameOutput, id, []byte{stream}, buf[:keep])
			}
		}
		if err != nil || n <= 0 {
			return
		}
	}
}

// run runs one job until it ends or timeUp is closed.
func (s *server) run(j job, timeUp <-chan struct{}) (res ExecResult) {
	req := j.req
	if len(req.Shell) == 0 {
		req.Shell = []string{"/bin/sh", "-lc"}
	}
	if req.MaxBytes <= 0 {
		req.MaxBytes = DefaultMaxBytes
	}
	argv := append(append([]string(nil), req.Shell...), req.Command)
	if req.Resident {
		return s.startResident(j.h, argv, req.Dir)
	}
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
		Sys:   &syscall.SysProcAttr{Setsid: true, Credential: s.cred},
	}
	s.mu.Lock()
	if j.h.closed {
		// leave has killed what ran and is waiting for this worker: no
		// command of its host may start after that kill.
		s.mu.Unlock()
		for _, fd := range []int{outR, outW, errR, errW} {
			unix.Close(fd)
		}
		return ExecResult{ExitCode: -1, Canceled: true}
	}
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
	go s.capture(j.h, j.id, Stdout, outR, req.MaxBytes, &res.StdoutBytes, &readers)
	go s.capture(j.h, j.id, Stderr, errR, req.MaxBytes, &res.StderrBytes, &readers)

	// While the command runs, look every limitPoll for it at the process
	// limit: a fork that failed there leaves no trace the agent could read
	// later.
	var poll <-chan time.Time
	var look *time.Timer
	if s.nproc > 0 {
		look = time.NewTimer(limitPollNear)
		defer look.Stop()
		poll = look.C
	}
	last, started := 0, time.Now()
wait:
	for {
		select {
		case <-exited:
			break wait
		case <-timeUp:
			res.TimedOut = true
			break wait
		case <-poll:
			n := countTasks()
			res.ProcessLimit = res.ProcessLimit || s.atProcessLimit(n, 1)
			next := limitPoll
			if !res.ProcessLimit && (time.Since(started) < limitPollStart || int64(n) >= s.nproc/2 && n != last) {
				// Many tasks, and their number moving: a fork bomb
				// rises to the limit and dies within one limitPoll.
				next = limitPollNear
			}
			last = n
			look.Reset(next)
		}
	}
	if s.nproc > 0 && !res.ProcessLimit {
		// The command's main process has exited by now, and so, often,
		// have the shells between it and what they forked (a subshell
		// running a fork loop): one more of slack.
		res.ProcessLimit = s.atProcessLimit(countTasks(), 2)
	}
	// Whatever the command left behind dies with it: background jobs,
	// setsid'ed daemons and double-forked orphans alike (but the resident).
	s.killAll()
	s.waitIdle()
	<-exited
	readers.Wait()

	s.mu.Lock()
	ws := *s.status
	s.mainPID = 0
	if j.h.canceled[j.id] {
		res.Canceled = true
		delete(j.h.canceled, j.id)
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
		if res := s.residentPID(); res == 0 {
			if err := unix.Kill(-1, 0); err == unix.ESRCH {
				return
			}
		} else if len(s.others(res)) == 0 {
			return
		}
		s.killAll()
		if s.reapAll() {
			continue
		}
		select {
		case <-s.reaped:
		case <-time.After(time.Millisecond):
		}
	}
}

// limitPoll is how often the agent counts a running command's tasks. A
// fork loop reaches the limit and its forks fail within tens of
// milliseconds, and what it leaves at the end may be below the limit (the
// shells that forked have exited), so the poll must be short; a count is one
// readdir of /proc plus one per process, and costs nothing for a command
// that ends before the first tick.
const limitPoll = 25 * time.Millisecond

// limitPollNear is how often the agent counts in a command's first
// limitPollStart and while the tasks are past half the limit and their
// number changes between looks: a fork bomb churns through the limit (its
// shells fork, fail and exit) within a few milliseconds, and with the agent
// reaping its orphans it sits at the limit only in instants. A steady crowd
// of tasks (a thread pool) is looked at every limitPoll. Measured with
// busybox's `bomb() { bomb | bomb & }; bomb` at a limit of 64: reported 3 of
// 12 times on crun and runc with limitPoll alone, 17 of 20 with these.
const limitPollNear = time.Millisecond

// limitPollStart is how long a command is looked at every limitPollNear
// from its start: a bomb started at once can be over before a first look
// after limitPoll.
const limitPollStart = 50 * time.Millisecond

// atProcessLimit reports whether tasks, the commands' tasks (processes and
// threads, everything in the sandbox but the agent) are within slack of
// their RLIMIT_NPROC: at that count the next fork fails with EAGAIN. One
// of slack covers a main process that has just exited and, under
// gVisor, which charges a task to the user it was forked as, the command's
// first process, still counted as the agent's.
// There is no shortcut by kill(-1, 0): under gVisor it can find no process
// while /proc still lists the bomb's unreaped ones, which hold the limit.
func (s *server) atProcessLimit(tasks int, slack int64) bool {
	return int64(tasks) >= s.nproc-slack
}

// countTasks counts the tasks of every process but the agent. Every
// process /proc lists holds at least one slot under RLIMIT_NPROC until it
// is reaped, whether or not its tasks can be listed: under gVisor a fork
// bomb sits at the limit mostly in processes that /proc lists but whose
// directory cannot be opened (exited, not yet reaped by their shells), and
// the agent, starved by the bomb, gets few looks. On Linux a process listed
// and reaped before the open counts too: an overcount by the few that die in
// that instant, which matters only within them of the limit.
func countTasks() int {
	proc, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	names, _ := proc.Readdirnames(-1)
	proc.Close()
	n := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == 1 {
			continue
		}
		var tasks []string
		if d, err := os.Open("/proc/" + name + "/task"); err == nil {
			tasks, _ = d.Readdirnames(-1)
			d.Close()
		}
		n += max(1, len(tasks))
	}
	return n
}

// killAll sends SIGKILL to every process of the sandbox except the agent
// and, when there is one, the resident process and its descendants.
func (s *server) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killAllLocked()
}

// killAllLocked is killAll with s.mu held: no command starts meanwhile,
// so the kill reaches the command it was meant for and no other.
func (s *server) killAllLocked() {
	if s.resident == 0 {
		unix.Kill(-1, unix.SIGKILL)
		return
	}
	for _, pid := range s.others(s.resident) {
		unix.Kill(pid, unix.SIGKILL)
	}
}

func (s *server) residentPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resident
}

// others lists the processes that are neither the agent nor res (the
// resident) or one of its descendants; tree lists those that are.
func (s *server) others(res int) []int { _, out := split(res); return out }
func (s *server) tree(res int) []int   { in, _ := split(res); return in }

// split divides the processes but the agent into res and its descendants
// and the others, by the parents /proc gives. A process whose parent
// cannot be read counts as another (it is killed): a resident's child is
// reparented to the agent, not to the resident, when its parent dies, so
// nothing a command starts can join the resident's tree.
func split(res int) (in, out []int) {
	proc, err := os.Open("/proc")
	if err != nil {
		return nil, nil
	}
	names, _ := proc.Readdirnames(-1)
	proc.Close()
	parent := map[int]int{}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == 1 {
			continue
		}
		parent[pid] = 0
		if b, err := os.ReadFile("/proc/" + name + "/stat"); err == nil {
			// pid (comm) state ppid …: comm may hold spaces and parens.
			if i := bytes.LastIndexByte(b, ')'); i >= 0 {
				if f := strings.Fields(string(b[i+1:])); len(f) >= 2 {
					parent[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
	}
	inTree := func(pid int) bool {
		for n := 0; pid > 1 && n < 64; n++ {
			if pid == res {
				return true
			}
			pid = parent[pid]
		}
		return false
	}
	for pid := range parent {
		if inTree(pid) {
			in = append(in, pid)
		} else {
			out = append(out, pid)
		}
	}
	return in, out
}

// startResident starts argv as h's resident process, after killing the
// one before it (whichever host started it) and its descendants. It is
// answered at once: exit code 0 once it has started.
func (s *server) startResident(h *host, argv []string, dir string) ExecResult {
	s.mu.Lock()
	if h.closed {
		s.mu.Unlock()
		return ExecResult{ExitCode: -1, Canceled: true}
	}
	old := s.resident
	s.resident, s.residentOf = 0, nil
	s.mu.Unlock()
	if old != 0 {
		// Now not spared: the old resident's tree goes with the rest.
		s.killAll()
		s.waitIdle()
	}
	null, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ExecResult{ExitCode: -1, Error: "open " + os.DevNull + ": " + err.Error()}
	}
	defer unix.Close(null)
	attr := &syscall.ProcAttr{
		Dir:   dir,
		Env:   s.env,
		Files: []uintptr{uintptr(s.devnull), uintptr(null), uintptr(null)},
		Sys:   &syscall.SysProcAttr{Setsid: true, Credential: s.cred},
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	pid, err := syscall.ForkExec(argv[0], argv, attr)
	if err != nil {
		return ExecResult{ExitCode: 127, Error: "start " + argv[0] + ": " + err.Error()}
	}
	s.resident, s.residentOf = pid, h
	return ExecResult{}
}

// shutdown ends the agent's work once every host has left: the worker
// returns (after the kill and reaping of what ran), whatever is left is
// killed and reaped, and the reaper and /dev/null go.
func (s *server) shutdown() {
	s.mu.Lock()
	s.resident, s.residentOf = 0, nil
	s.mu.Unlock()
	close(s.queue)
	<-s.workerDone
	s.killAll()
	s.waitIdle()
	signal.Stop(s.sigs)
	close(s.sigs)
	unix.Close(s.devnull)
}

// fileStopWait bounds how long stop waits for file requests.
const fileStopWait = 5 * time.Second

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
