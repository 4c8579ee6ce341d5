package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shellgate/shellgate/internal/cluster"
	"github.com/shellgate/shellgate/internal/gateway"
	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/sandbox"
)

// File steps of a gateway request whose container woke on another node
// after the request was routed (the shell calls of such a request run
// there through remoteExec): the text editor's reads and writes, a
// container_upload's copy-in, promote, and the listing behind a call's
// changed files go to that node's container-file API
// (/api/v1/containers/{id}/files…, cfiles.go), node to node with the
// client's key and the hop header, so the owner serves them itself. Its
// answers are untrusted like a sandbox's: bodies are read with caps,
// ids and paths are checked, and its errors become the sandbox errors a
// local step would have met (a missing file is a missing file, a busy
// container 429).

// remoteFiles is the file API of container id on the node in rt.
type remoteFiles struct {
	from    string             // this node's id, the hop header's value
	proxied prometheus.Counter // counts each request sent
	key     http.Header
	rt      cluster.Route
	id      string
}

// Caps on what the owner may send back: an error's body, one file's
// description, one page of a listing (1000 entries with the longest paths
// an id and a path can hold).
const (
	maxRemoteError   = 64 << 10
	maxRemoteObject  = 64 << 10
	maxRemoteListing = 16 << 20
)

// do sends one request to the owner's file API at suffix (below
// /api/v1/containers/{id}/files) and returns its 200 answer; any other
// answer is returned as the error it means (remoteFileErr).
func (n remoteFiles) do(ctx context.Context, method, suffix string, body io.Reader, contentType string) (*http.Response, error) {
	u := strings.TrimSuffix(n.rt.URL, "/") + "/api/v1/containers/" + url.PathEscape(n.id) + "/files" + suffix
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("node %s has a bad URL %q: %w", n.rt.Node, n.rt.URL, err)
	}
	maps.Copy(req.Header, n.key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set(HopHeader, n.from)
	n.proxied.Inc()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &gateway.RequestError{Status: http.StatusBadGateway,
			Message: fmt.Sprintf("the container is awake on node %s, which did not answer; try again", n.rt.Node)}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, n.answerErr(resp)
	}
	return resp, nil
}

// answerErr is the error an owner's non-200 answer means.
func (n remoteFiles) answerErr(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxRemoteError))
	var eb errorBody
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &eb) == nil && eb.Error.Message != "" {
		msg = eb.Error.Message
	}
	msg = strings.ToValidUTF8(msg, "?")
	if len(msg) > 1000 {
		msg = msg[:1000]
		for !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
		msg += "…"
	}
	node := n.rt.Node
	switch resp.StatusCode {
	case http.StatusNotFound:
		if strings.HasPrefix(msg, "no container ") {
			return errGatewayGone
		}
		return fmt.Errorf("%w (node %s: %s)", sandbox.ErrFileNotFound, node, msg)
	case http.StatusGone:
		return &gateway.RequestError{Status: http.StatusGone, Message: "the container expired"}
	case http.StatusConflict, http.StatusTooManyRequests:
		// The owner's call lock (or its own claim) is taken: really busy.
		return &gateway.RequestError{Status: http.StatusTooManyRequests,
			Message: fmt.Sprintf("the container is awake on node %s and busy there; try again when that call ends (%s)", node, msg)}
	case http.StatusBadRequest:
		if strings.Contains(msg, "not a regular file") || strings.Contains(msg, "in the way") {
			return fmt.Errorf("%w (node %s: %s)", sandbox.ErrNotRegular, node, msg)
		}
		return fmt.Errorf("%w (node %s: %s)", sandbox.ErrBadPath, node, msg)
	case http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return fmt.Errorf("%w (node %s: %s)", sandbox.ErrTooLarge, node, msg)
	case http.StatusNotImplemented:
		return fmt.Errorf("%w (node %s: %s)", sandbox.ErrNotSupported, node, msg)
	}
	return fmt.Errorf("node %s answered %d: %s", node, resp.StatusCode, msg)
}

// readFile reads the file at rel (relative to the home), at most maxBytes
// (sandbox.ErrTooLarge beyond), streamed from the owner.
func (n remoteFiles) readFile(ctx context.Context, rel string, maxBytes int64) ([]byte, error) {
	resp, err := n.do(ctx, http.MethodGet, "/"+CFileID(rel)+"/content", nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.ContentLength > maxBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, over %d", sandbox.ErrTooLarge, rel, resp.ContentLength, maxBytes)
	}
	var buf bytes.Buffer
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength))
	}
	// The owner's Content-Length is not trusted to bound the read.
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBytes+1)); err != nil {
		return nil, fmt.Errorf("node %s: reading %s: %w", n.rt.Node, rel, err)
	}
	if int64(buf.Len()) > maxBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", sandbox.ErrTooLarge, rel, maxBytes)
	}
	return buf.Bytes(), nil
}

// writeFile creates or replaces the file at rel with r's bytes, streamed
// to the owner as a multipart upload (its upload cap applies).
func (n remoteFiles) writeFile(ctx context.Context, rel string, r io.Reader) error {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := mw.WriteField("path", rel)
		if err == nil {
			var part io.Writer
			if part, err = mw.CreateFormFile("file", path.Base(rel)); err == nil {
				if _, err = io.Copy(part, r); err == nil {
					err = mw.Close()
				}
			}
		}
		pw.CloseWithError(err)
	}()
	resp, err := n.do(ctx, http.MethodPost, "", pr, mw.FormDataContentType())
	pr.CloseWithError(errors.New("request ended")) // lets the writer go if the owner stopped reading
	<-done                                         // r is not read after this returns
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = n.object(resp, rel)
	return err
}

// copyIn copies workspace file fileID into the home at rel: the owner
// reads it from the shared file store, so no bytes pass through here.
func (n remoteFiles) copyIn(ctx context.Context, fileID, rel string) error {
	body, err := json.Marshal(map[string]string{"file_id": fileID, "path": rel})
	if err != nil {
		return err
	}
	resp, err := n.do(ctx, http.MethodPost, "", bytes.NewReader(body), "application/json")
	if errors.Is(err, sandbox.ErrFileNotFound) {
		return &gateway.RequestError{Status: http.StatusNotFound, Param: "file_id", Message: fmt.Sprintf("No file found with id %q.", fileID)}
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = n.object(resp, rel)
	return err
}

// object reads and checks the container file the owner answered for rel.
func (n remoteFiles) object(resp *http.Response, rel string) (ContainerFile, error) {
	var f ContainerFile
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxRemoteObject)).Decode(&f); err != nil {
		return f, fmt.Errorf("node %s: bad container file in its answer: %w", n.rt.Node, err)
	}
	if f.ID != CFileID(rel) || f.Path != rel || f.Bytes < 0 {
		return f, fmt.Errorf("node %s answered file %q (%q) for %q", n.rt.Node, f.ID, f.Path, rel)
	}
	return f, nil
}

// promote copies the file at rel into the workspace's files (the owner
// writes the blob to the shared store) and returns the new file's id.
func (n remoteFiles) promote(ctx context.Context, rel string) (string, error) {
	resp, err := n.do(ctx, http.MethodPost, "/"+CFileID(rel)+"/promote", nil, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var f struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxRemoteObject)).Decode(&f); err != nil {
		return "", fmt.Errorf("node %s: bad file in its answer: %w", n.rt.Node, err)
	}
	if !store.ValidBlobID(f.ID) {
		return "", fmt.Errorf("node %s answered a bad file id %q", n.rt.Node, f.ID)
	}
	return f.ID, nil
}

// remoteEntry is a file of a listing: its size and modification second.
type remoteEntry struct {
	bytes, mtime int64
}

// list is the first sandbox.MaxListLimit files of the home (the files a
// local changed-files report looks at), by path relative to the home.
// Entries whose id and path disagree are dropped.
func (n remoteFiles) list(ctx context.Context) (map[string]remoteEntry, error) {
	resp, err := n.do(ctx, http.MethodGet, fmt.Sprintf("?limit=%d", sandbox.MaxListLimit), nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var page struct {
		Data []ContainerFile `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxRemoteListing)).Decode(&page); err != nil {
		return nil, fmt.Errorf("node %s: bad file listing: %w", n.rt.Node, err)
	}
	if len(page.Data) > sandbox.MaxListLimit {
		return nil, fmt.Errorf("node %s listed %d files for a page of %d", n.rt.Node, len(page.Data), sandbox.MaxListLimit)
	}
	out := make(map[string]remoteEntry, len(page.Data))
	for _, f := range page.Data {
		if rel, err := ParseCFileID(f.ID); err == nil && rel == f.Path && f.Bytes >= 0 {
			out[rel] = remoteEntry{bytes: f.Bytes, mtime: f.CreatedAt}
		}
	}
	return out, nil
}

// changedSince is the changed-files report of a call run on the owner:
// the files of after that are not in before, or differ in size or
// modification second, newest first, at most maxChanged. The listing
// gives seconds, and the two nodes' clocks are not compared: a file
// rewritten with the same size within the second of the listing before
// the call is not reported.
func changedSince(before, after map[string]remoteEntry) []gateway.ChangedFile {
	var out []gateway.ChangedFile
	for rel, e := range after {
		if b, ok := before[rel]; !ok || b != e {
			out = append(out, gateway.ChangedFile{ID: CFileID(rel), Path: rel, Bytes: e.bytes, ModTime: time.Unix(e.mtime, 0)})
		}
	}
	slices.SortFunc(out, func(x, y gateway.ChangedFile) int {
		if c := y.ModTime.Compare(x.ModTime); c != 0 {
			return c
		}
		return strings.Compare(x.Path, y.Path)
	})
	if len(out) > maxChanged {
		out = out[:maxChanged]
	}
	return out
}
