package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/shellgate/shellgate/sandbox/homefs"
)

// fileCall is the host's side of one file request. Its state is the read
// loop's alone.
type fileCall struct {
	read    bool
	max     int64           // read: the cap on the file's size
	results chan FileResult // the first FileDone
	data    chan chunk      // read: the bytes, then io.EOF or an error
	gone    chan struct{}   // closed when the caller stops reading
	got     bool            // the first FileDone came
	size    int64           // read: the size announced
	recv    int64           // read: bytes received
}

type chunk struct {
	b   []byte
	err error
}

// fileFrame checks one frame of a file request from the agent: a second
// result, bytes past the size announced or before it, a size over the cap
// or a stream that ends short break the protocol.
func (c *Client) fileFrame(id uint32, fc *fileCall, typ byte, payload []byte) error {
	if typ == frameFileDone {
		var res FileResult
		if err := json.Unmarshal(payload, &res); err != nil {
			return violation("result of file request %d is not valid JSON: %v", id, err)
		}
		if !fc.got {
			fc.got = true
			if fc.read && res.Error == "" {
				if res.Info == nil || res.Info.Size < 0 || res.Info.Size > fc.max {
					return violation("file read %d announced no size or one over the cap %d", id, fc.max)
				}
				fc.size = res.Info.Size
			} else {
				c.forget(id)
			}
			fc.results <- res
			return nil
		}
		if !fc.read || res.Error == "" {
			return violation("a second result for file request %d", id)
		}
		c.forget(id)
		fc.deliver(chunk{err: fileError(res)})
		return nil
	}
	if !fc.read || !fc.got {
		return violation("file bytes for file request %d, which reads none (yet)", id)
	}
	if len(payload) == 0 {
		if fc.recv != fc.size {
			return violation("file read %d ended after %d of %d bytes", id, fc.recv, fc.size)
		}
		c.forget(id)
		fc.deliver(chunk{err: io.EOF})
		return nil
	}
	fc.recv += int64(len(payload))
	if fc.recv > fc.size {
		return violation("file read %d sent more than the %d bytes announced", id, fc.size)
	}
	fc.deliver(chunk{b: bytes.Clone(payload)})
	return nil
}

// deliver hands a chunk to the reader, waiting for it (the agent is held
// back meanwhile) unless the reader is gone.
func (fc *fileCall) deliver(ch chunk) {
	select {
	case fc.data <- ch:
	case <-fc.gone:
	}
}

// ErrNoFiles: the agent is too old to serve file requests.
var ErrNoFiles = errors.New("agent: the sandbox's agent does not serve file requests (an older version)")

// startFile registers and sends one file request.
func (c *Client) startFile(req FileRequest, fc *fileCall) (uint32, error) {
	if !c.hello.Files {
		return 0, ErrNoFiles
	}
	payload, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	fc.results = make(chan FileResult, 1)
	fc.data = make(chan chunk, 4)
	fc.gone = make(chan struct{})
	return c.start(frameFile, &call{file: fc, result: make(chan ExecResult, 1)}, payload)
}

// stop abandons a request: the agent is told to stop it.
func (c *Client) stop(id uint32, fc *fileCall) {
	c.forget(id)
	select {
	case <-fc.gone:
	default:
		close(fc.gone)
	}
	c.send(frameCancel, id)
}

// waitFile waits for a request's first result.
func (c *Client) waitFile(ctx context.Context, id uint32, fc *fileCall) (FileResult, error) {
	select {
	case res := <-fc.results:
		if res.Error != "" {
			return res, fileError(res)
		}
		return res, nil
	case <-c.done:
		select {
		case res := <-fc.results:
			if res.Error != "" {
				return res, fileError(res)
			}
			return res, nil
		default:
		}
		return FileResult{}, c.Err()
	case <-ctx.Done():
		c.stop(id, fc)
		return FileResult{}, ctx.Err()
	}
}

func (c *Client) fileOnce(ctx context.Context, req FileRequest) (FileResult, error) {
	fc := &fileCall{}
	id, err := c.startFile(req, fc)
	if err != nil {
		return FileResult{}, err
	}
	return c.waitFile(ctx, id, fc)
}

// fileInfo checks an entry the agent returned for path want ("" for any
// valid path) and converts it.
func fileInfo(e *FileEntry, want string) (homefs.FileInfo, error) {
	if e == nil {
		return homefs.FileInfo{}, violation("a file result without the file")
	}
	p := string(e.Path)
	if clean, err := homefs.CleanRel(p); err != nil || clean != p {
		return homefs.FileInfo{}, violation("a file path that is not a clean path inside the home: %q", p)
	}
	if want != "" && p != want {
		return homefs.FileInfo{}, violation("a result for %q, asked for %q", p, want)
	}
	if e.Size < 0 {
		return homefs.FileInfo{}, violation("a negative file size for %q", p)
	}
	if e.Mode&^uint32(fs.ModePerm) != 0 {
		return homefs.FileInfo{}, violation("mode %o of %q is more than permission bits", e.Mode, p)
	}
	return homefs.FileInfo{Path: p, Size: e.Size, ModTime: time.Unix(0, e.ModTime).UTC(), Mode: fs.FileMode(e.Mode)}, nil
}

// ListFiles lists one page of the regular files beneath home (the rules
// of homefs.ListDir). What the agent returns is checked: at most the
// page's limit of clean paths inside the home, in strict order past the
// cursor, sizes not negative.
func (c *Client) ListFiles(ctx context.Context, home string, opts homefs.ListOptions) (homefs.FileList, error) {
	if opts.Limit == 0 {
		opts.Limit = homefs.MaxListLimit
	}
	if opts.Limit < 1 || opts.Limit > homefs.MaxListLimit {
		return homefs.FileList{}, fmt.Errorf("list limit %d: want 1-%d", opts.Limit, homefs.MaxListLimit)
	}
	res, err := c.fileOnce(ctx, FileRequest{Op: FileList, Home: home, After: []byte(opts.After), Limit: opts.Limit, Desc: opts.Desc})
	if err != nil {
		return homefs.FileList{}, err
	}
	if len(res.Files) > opts.Limit {
		return homefs.FileList{}, c.broke(violation("a page of %d files, the limit is %d", len(res.Files), opts.Limit))
	}
	out := homefs.FileList{More: res.More, Next: string(res.Next), Files: make([]homefs.FileInfo, 0, len(res.Files))}
	prev := opts.After
	for i := range res.Files {
		fi, err := fileInfo(&res.Files[i], "")
		if err != nil {
			return homefs.FileList{}, c.broke(err)
		}
		if prev != "" && (!opts.Desc && fi.Path <= prev || opts.Desc && fi.Path >= prev) {
			return homefs.FileList{}, c.broke(violation("file %q out of order after %q", fi.Path, prev))
		}
		prev = fi.Path
		out.Files = append(out.Files, fi)
	}
	if len(out.Next) > homefs.MaxPathBytes+1 || strings.ContainsRune(out.Next, 0) {
		return homefs.FileList{}, c.broke(violation("a listing cursor that is no path"))
	}
	if !out.More {
		out.Next = ""
	}
	return out, nil
}

// broke ends the connection for a violation found after the read loop
// handed the result over, and returns it.
func (c *Client) broke(err error) error {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.r.Close()
	c.w.Close()
	return err
}

// StatFile describes the regular file rel beneath home.
func (c *Client) StatFile(ctx context.Context, home, rel string) (homefs.FileInfo, error) {
	clean, err := homefs.CleanRel(rel)
	if err != nil {
		return homefs.FileInfo{}, err
	}
	res, err := c.fileOnce(ctx, FileRequest{Op: FileStat, Home: home, Path: clean})
	return c.infoOf(res, err, clean)
}

// RemoveFile deletes the regular file rel beneath home.
func (c *Client) RemoveFile(ctx context.Context, home, rel string) error {
	clean, err := homefs.CleanRel(rel)
	if err != nil {
		return err
	}
	_, err = c.fileOnce(ctx, FileRequest{Op: FileRemove, Home: home, Path: clean})
	return err
}

// OpenFile opens the regular file rel beneath home for reading; a file
// over maxBytes is homefs.ErrTooLarge. The reader yields exactly the size
// in the FileInfo, then io.EOF; Close it to stop early.
func (c *Client) OpenFile(ctx context.Context, home, rel string, maxBytes int64) (homefs.FileInfo, io.ReadCloser, error) {
	clean, err := homefs.CleanRel(rel)
	if err != nil {
		return homefs.FileInfo{}, nil, err
	}
	fc := &fileCall{read: true, max: max(maxBytes, 0)}
	id, err := c.startFile(FileRequest{Op: FileRead, Home: home, Path: clean, MaxBytes: fc.max}, fc)
	if err != nil {
		return homefs.FileInfo{}, nil, err
	}
	res, err := c.waitFile(ctx, id, fc)
	if err != nil {
		return homefs.FileInfo{}, nil, err
	}
	fi, err := fileInfo(res.Info, clean)
	if err != nil {
		c.stop(id, fc)
		return homefs.FileInfo{}, nil, c.broke(err)
	}
	return fi, &fileReader{c: c, id: id, fc: fc, ctx: ctx}, nil
}

type fileReader struct {
	c    *Client
	id   uint32
	fc   *fileCall
	ctx  context.Context
	buf  []byte
	err  error
	done bool
}

func (r *fileReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		select {
		case ch := <-r.fc.data:
			r.buf, r.err = ch.b, ch.err
		case <-r.c.done:
			select {
			case ch := <-r.fc.data:
				r.buf, r.err = ch.b, ch.err
			default:
				r.err = r.c.Err()
			}
		case <-r.ctx.Done():
			r.err = r.ctx.Err()
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close stops the read if it has not ended.
func (r *fileReader) Close() error {
	if !r.done {
		r.done = true
		r.c.stop(r.id, r.fc)
	}
	return nil
}

// PutFile writes r to rel beneath home (created with its directories as
// the commands' user, renamed into place once complete) and describes the
// file written. maxBytes > 0 caps the bytes (homefs.ErrTooLarge past it).
func (c *Client) PutFile(ctx context.Context, home, rel string, r io.Reader, maxBytes int64) (homefs.FileInfo, error) {
	return c.PutFilePerm(ctx, home, rel, r, maxBytes, 0)
}

// PutFilePerm is PutFile that gives the file the permission bits perm
// (0o777 at most; 0: the default). An agent too old to know modes writes
// the default; the FileInfo returned says which the file got.
func (c *Client) PutFilePerm(ctx context.Context, home, rel string, r io.Reader, maxBytes int64, perm fs.FileMode) (homefs.FileInfo, error) {
	clean, err := homefs.CleanRel(rel)
	if err != nil {
		return homefs.FileInfo{}, err
	}
	if perm&^fs.ModePerm != 0 {
		return homefs.FileInfo{}, fmt.Errorf("write %s: mode %v is more than permission bits", clean, perm)
	}
	fc := &fileCall{}
	id, err := c.startFile(FileRequest{Op: FileWrite, Home: home, Path: clean, MaxBytes: max(maxBytes, 0), Mode: uint32(perm)}, fc)
	if err != nil {
		return homefs.FileInfo{}, err
	}
	buf := make([]byte, fileChunk)
	var sent int64
	for {
		// The agent may have refused the write already.
		select {
		case res := <-fc.results:
			fc.results <- res
			return c.putResult(ctx, id, fc, clean)
		default:
		}
		if err := ctx.Err(); err != nil {
			c.stop(id, fc)
			return homefs.FileInfo{}, err
		}
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			sent += int64(n)
			if maxBytes > 0 && sent > maxBytes {
				c.abortWrite(ctx, id, fc)
				return homefs.FileInfo{}, fmt.Errorf("write %s: %w: more than %d bytes", clean, homefs.ErrTooLarge, maxBytes)
			}
			if err := c.send(frameData, id, buf[:n]); err != nil {
				c.stop(id, fc)
				return homefs.FileInfo{}, fmt.Errorf("%w: %v", ErrClosed, err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			c.abortWrite(ctx, id, fc)
			return homefs.FileInfo{}, fmt.Errorf("write %s: %w", clean, rerr)
		}
	}
	if err := c.send(frameData, id); err != nil {
		c.stop(id, fc)
		return homefs.FileInfo{}, fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return c.putResult(ctx, id, fc, clean)
}

// abortWrite stops a write the host will not finish and waits for the
// agent's answer to it, which comes once the agent has removed the write's
// temporary file: a PutFile that failed has left nothing in the home by
// the time it returns (a kube home restore that failed, say, is followed
// by an empty home, not one still being cleaned). Every agent that serves
// files answers a canceled write; ctx bounds the wait all the same.
func (c *Client) abortWrite(ctx context.Context, id uint32, fc *fileCall) {
	if err := c.send(frameCancel, id); err != nil {
		c.stop(id, fc)
		return
	}
	select {
	case <-fc.results: // fileFrame forgot the request
	case <-c.done:
	case <-ctx.Done():
		c.stop(id, fc)
	}
}

func (c *Client) putResult(ctx context.Context, id uint32, fc *fileCall, clean string) (homefs.FileInfo, error) {
	res, err := c.waitFile(ctx, id, fc)
	return c.infoOf(res, err, clean)
}

// infoOf is the file the agent's answer res (or err) describes; an answer
// without a sound description breaks the connection.
func (c *Client) infoOf(res FileResult, err error, clean string) (homefs.FileInfo, error) {
	if err != nil {
		return homefs.FileInfo{}, err
	}
	fi, err := fileInfo(res.Info, clean)
	if err != nil {
		return homefs.FileInfo{}, c.broke(err)
	}
	return fi, nil
}
