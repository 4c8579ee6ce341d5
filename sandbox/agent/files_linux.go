package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellgate/shellgate/sandbox/homefs"
)

// fileOp is a file request in progress: a write's pipe the host's Data
// frames go to, and what stops a read.
type fileOp struct {
	pw     *io.PipeWriter // write: the bytes from the host
	ctx    context.Context
	cancel context.CancelFunc
}

type fileOps struct {
	mu  sync.Mutex
	ops map[uint32]*fileOp
	wg  sync.WaitGroup // the requests' goroutines
}

// startFile runs one file request on a goroutine of its own.
func (h *host) startFile(id uint32, payload []byte) {
	var req FileRequest
	if err := json.Unmarshal(payload, &req); err != nil {
		h.send(frameFileDone, id, mustJSON(FileResult{Error: "bad request: " + err.Error()}))
		return
	}
	// A file request in progress makes the other hosts' Peers busy, as a
	// command does; none starts while another host holds the sandbox.
	if !h.s.activity(h, 1) {
		h.send(frameFileDone, id, mustJSON(FileResult{Error: ErrHeld.Error(), Code: "held"}))
		return
	}
	op := &fileOp{}
	op.ctx, op.cancel = context.WithCancel(context.Background())
	var pr *io.PipeReader
	if req.Op == FileWrite {
		pr, op.pw = io.Pipe()
	}
	h.files.mu.Lock()
	if h.files.ops == nil {
		h.files.ops = map[uint32]*fileOp{}
	}
	if h.files.ops[id] != nil || len(h.files.ops) >= 16 {
		h.files.mu.Unlock()
		h.s.activity(h, -1)
		op.cancel()
		h.send(frameFileDone, id, mustJSON(FileResult{Error: "agent: too many file requests or a reused id"}))
		return
	}
	h.files.ops[id] = op
	h.files.wg.Add(1)
	h.files.mu.Unlock()
	go func() {
		defer h.files.wg.Done()
		defer h.s.activity(h, -1)
		// The thread does the request as the commands' user (setfsuid
		// and setfsgid are per thread) and is not reused afterwards: the
		// goroutine exits still locked to it, and Go ends the thread.
		runtime.LockOSThread()
		res := h.doFile(id, req, op, pr)
		if pr != nil {
			pr.CloseWithError(errors.New("the write ended"))
		}
		h.files.mu.Lock()
		delete(h.files.ops, id)
		h.files.mu.Unlock()
		op.cancel()
		if res != nil {
			h.send(frameFileDone, id, mustJSON(res))
		}
	}()
}

// fileData passes a write's bytes on; it blocks until the write took them
// (or ended), which holds the host back.
func (h *host) fileData(id uint32, data []byte) {
	h.files.mu.Lock()
	op := h.files.ops[id]
	h.files.mu.Unlock()
	if op == nil || op.pw == nil {
		return // ended already
	}
	if len(data) == 0 {
		op.pw.Close()
		return
	}
	op.pw.Write(data)
}

// cancelFile stops a file request in progress; it reports whether id was one.
func (h *host) cancelFile(id uint32) bool {
	h.files.mu.Lock()
	op := h.files.ops[id]
	h.files.mu.Unlock()
	if op == nil {
		return false
	}
	op.cancel()
	if op.pw != nil {
		op.pw.CloseWithError(errors.New("canceled by the host"))
	}
	return true
}

// endFiles cancels every file request in progress and waits, up to
// limit, for their goroutines to return. A write canceled before its last
// byte leaves nothing behind (WriteBeneathPerm removes its temporary
// file); reads and listings stop at their next chunk or directory entry,
// or at their next frame when the connection is closed.
func (h *host) endFiles(limit time.Duration) {
	h.files.mu.Lock()
	for _, op := range h.files.ops {
		op.cancel()
		if op.pw != nil {
			op.pw.CloseWithError(errors.New("the connection ended"))
		}
	}
	h.files.mu.Unlock()
	done := make(chan struct{})
	go func() { h.files.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
	}
}

// statResult describes the regular file clean beneath home as it is now.
func statResult(home, clean string) *FileResult {
	f, fi, err := homefs.OpenBeneath(home, clean)
	if err != nil {
		return failed(err)
	}
	f.Close()
	e := entry(fi)
	return &FileResult{Info: &e}
}

func failed(err error) *FileResult {
	return &FileResult{Error: err.Error(), Code: fileCode(err)}
}

func entry(fi homefs.FileInfo) FileEntry {
	return FileEntry{Path: []byte(fi.Path), Size: fi.Size, ModTime: fi.ModTime.UnixNano(), Mode: uint32(fi.Mode.Perm())}
}

// doFile does one request on a locked thread and returns its final
// result (nil when it sent everything itself).
func (h *host) doFile(id uint32, req FileRequest, op *fileOp, body io.Reader) *FileResult {
	if cred := h.s.cred; cred != nil {
		if err := unix.Setfsgid(int(cred.Gid)); err != nil {
			return failed(fmt.Errorf("setfsgid: %w", err))
		}
		if err := unix.Setfsuid(int(cred.Uid)); err != nil {
			return failed(fmt.Errorf("setfsuid: %w", err))
		}
	}
	if req.Home == "" || req.Home[0] != '/' {
		return failed(fmt.Errorf("%w: the home %q is not an absolute path", homefs.ErrBadPath, req.Home))
	}
	var clean string
	if req.Op != FileList {
		var err error
		if clean, err = homefs.CleanRel(req.Path); err != nil {
			return failed(err)
		}
	}
	switch req.Op {
	case FileList:
		opts := homefs.ListOptions{After: string(req.After), Limit: req.Limit, Desc: req.Desc}
		if opts.Limit == 0 {
			opts.Limit = homefs.MaxListLimit
		}
		if opts.Limit < 1 || opts.Limit > homefs.MaxListLimit {
			return failed(fmt.Errorf("list limit %d: want 1-%d", opts.Limit, homefs.MaxListLimit))
		}
		fd, err := unix.Open(req.Home, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return failed(fmt.Errorf("open home: %w", err))
		}
		defer unix.Close(fd)
		l, err := homefs.ListDir(op.ctx, fd, opts, homefs.MaxListScan)
		if err != nil {
			return failed(err)
		}
		return listResult(l)
	case FileStat:
		return statResult(req.Home, clean)
	case FileRemove:
		if err := homefs.RemoveBeneath(req.Home, clean); err != nil {
			return failed(err)
		}
		return &FileResult{}
	case FileWrite:
		r := body
		if req.MaxBytes > 0 {
			r = &capReader{r: body, left: req.MaxBytes, what: clean}
		}
		if err := homefs.WriteBeneathPerm(req.Home, clean, r, -1, -1, fs.FileMode(req.Mode)); err != nil {
			return failed(err)
		}
		return statResult(req.Home, clean)
	case FileRead:
		f, fi, err := homefs.OpenBeneath(req.Home, clean)
		if err != nil {
			return failed(err)
		}
		defer f.Close()
		if fi.Size > req.MaxBytes {
			return failed(fmt.Errorf("read %s: %w: %d bytes, the cap is %d", clean, homefs.ErrTooLarge, fi.Size, req.MaxBytes))
		}
		e := entry(fi)
		if err := h.send(frameFileDone, id, mustJSON(FileResult{Info: &e})); err != nil {
			return nil
		}
		// Exactly the size announced: a file that grew is cut there, one
		// that shrank ends the stream with an error.
		buf := make([]byte, fileChunk)
		left := fi.Size
		for left > 0 {
			if op.ctx.Err() != nil {
				return failed(errors.New("canceled by the host"))
			}
			n, err := f.Read(buf[:min(int64(len(buf)), left)])
			if n > 0 {
				left -= int64(n)
				if h.send(frameData, id, buf[:n]) != nil {
					return nil
				}
			}
			if err != nil && left > 0 {
				if err == io.EOF {
					err = fmt.Errorf("read %s: the file shrank while it was read", clean)
				}
				return failed(err)
			}
		}
		h.send(frameData, id)
		return nil
	}
	return failed(fmt.Errorf("unknown file operation %q", req.Op))
}

// listResult encodes a page, ending it early (More) when its encoding
// would not fit one frame.
func listResult(l homefs.FileList) *FileResult {
	res := &FileResult{More: l.More, Next: []byte(l.Next)}
	for _, f := range l.Files {
		res.Files = append(res.Files, entry(f))
	}
	for len(mustJSON(res)) > maxFrame-1024 && len(res.Files) > 1 {
		res.Files = res.Files[:len(res.Files)/2]
		res.More, res.Next = true, res.Files[len(res.Files)-1].Path
	}
	return res
}

// capReader fails a write past its cap.
type capReader struct {
	r    io.Reader
	left int64
	what string
}

func (c *capReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return 0, fmt.Errorf("write %s: %w: more bytes than the cap", c.what, homefs.ErrTooLarge)
	}
	return n, err
}
