package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shellgate/shellgate/internal/gateway/openaierr"
	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/tool"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/homefs"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// fuzzBackend is a sandbox backend of which the request decoding reads
// only the defaults; any other call panics, which fails the target.
type fuzzBackend struct{ sandbox.Backend }

func (fuzzBackend) Defaults() sandbox.Settings {
	return sandbox.Settings{Limits: runtime.Limits{CPUs: 2, MemoryBytes: 2 << 30, Processes: 512}, HomeBytes: 1 << 30}
}

// clientError fails t unless err is an *apiError the handler answers with
// a 4xx and a message.
func clientError(t *testing.T, in any, err error) {
	t.Helper()
	var ae *apiError
	if !errors.As(err, &ae) || ae.status < 400 || ae.status > 499 || ae.msg == "" {
		t.Fatalf("%q: %v is not a client error", in, err)
	}
}

// FuzzContainersJSON: the JSON bodies of the container and file routes
// (create in each API's shape, exec, a container upload's {"file_id",
// "path"}, and the empty body of the routes without one) are refused with
// a 4xx *apiError (never a 500), and a body that is taken decodes the
// same once re-encoded (decodeJSON drops or invents nothing). A create
// that is taken is a spec within the server's limits; an upload's path,
// when taken, is one the home's own check (homefs.CleanRel) takes as it
// is. The corpus is in testdata/fuzz/FuzzContainersJSON.
func FuzzContainersJSON(f *testing.F) {
	s := &Server{mgr: fuzzBackend{}, cfg: Config{NetworkAllow: &egress.Policy{Type: egress.Allowlist, AllowedDomains: []string{"*"}}}}
	p := Principal{Account: "a", Workspace: "w"}
	decode := func(t *testing.T, body []byte, v any, emptyOK bool) bool {
		r := httptest.NewRequest("POST", "/api/v1/containers", bytes.NewReader(body))
		if err := decodeJSON(r, v, emptyOK); err != nil {
			clientError(t, body, err)
			return false
		}
		// Re-encoded, it reads the same.
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%q: decoded as %+v, which does not encode: %v", body, v, err)
		}
		w := reflect.New(reflect.TypeOf(v).Elem())
		if err := decodeJSON(httptest.NewRequest("POST", "/", bytes.NewReader(again)), w.Interface(), emptyOK); err != nil || !reflect.DeepEqual(w.Elem().Interface(), reflect.ValueOf(v).Elem().Interface()) {
			t.Fatalf("%q re-encoded as %s reads as %+v (%v)", body, again, w.Elem().Interface(), err)
		}
		return true
	}
	f.Fuzz(func(t *testing.T, route byte, body []byte) {
		switch route % 6 {
		case 0, 1, 2:
			sh := shape(route % 3)
			var req createRequest
			if !decode(t, body, &req, sh == shapeOpenRouter) {
				return
			}
			sp, err := s.spec(p, req, sh)
			if err != nil {
				clientError(t, body, err)
				return
			}
			max := s.maxLimits()
			if sp.Limits.CPUMillis > max.CPUMillis || sp.Limits.MemoryBytes > max.MemoryBytes || sp.Limits.Processes > max.Processes || sp.Limits.DiskBytes > max.DiskBytes ||
				sp.Limits.CPUMillis < 0 || sp.Limits.MemoryBytes < 0 || sp.Limits.Processes < 0 || sp.Limits.DiskBytes < 0 || len(req.FileIDs) > maxFileIDs {
				t.Fatalf("%q: taken as %+v, past the limits %+v", body, sp, max)
			}
		case 3:
			var req execRequest
			if !decode(t, body, &req, false) {
				return
			}
			if _, err := (tool.ShellArgs{Commands: req.Commands, TimeoutMs: req.TimeoutMs, MaxOutputLength: req.MaxOutputLength}).Plan(); err != nil && err.Error() == "" {
				t.Fatalf("%q: refused without a word", body)
			}
		case 4:
			var req struct {
				FileID *string `json:"file_id"`
				Path   *string `json:"path"`
			}
			if !decode(t, body, &req, false) || req.Path == nil || *req.Path == "" {
				return
			}
			rel, err := uploadDest(*req.Path, "")
			if err != nil {
				clientError(t, body, err)
				return
			}
			if clean, err := homefs.CleanRel(rel); err != nil || clean != rel {
				t.Fatalf("%q: upload path %q, which the home takes as %q (%v)", body, rel, clean, err)
			}
		case 5:
			var v struct{}
			decode(t, body, &v, true)
		}
	})
}

// FuzzChatCompletionsBody: what the Chat Completions route reads of a
// body before it resolves the model (the JSON object, the model, the
// tools' types) refuses with a 4xx in OpenAI's envelope, never a 500;
// with no model providers configured, every body ends there. The corpus
// is in testdata/fuzz/FuzzChatCompletionsBody.
func FuzzChatCompletionsBody(f *testing.F) {
	s := &Server{}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		s.chatCompletions(w, httptest.NewRequest("POST", "/v1/chat/completions", bytes.NewReader(body)), Principal{})
		var env openaierr.Body
		if w.Code < 400 || w.Code > 499 || json.Unmarshal(w.Body.Bytes(), &env) != nil || env.Error.Message == "" || env.Error.Type != "invalid_request_error" {
			t.Fatalf("%q: %d %s", body, w.Code, w.Body.Bytes())
		}
	})
}

// memFiles and memBlobs hold a workspace's files in memory for
// FuzzMultipartUpload; what they are not asked for panics.
type memFiles struct {
	store.Files
	recs []store.File
}

func (m *memFiles) Create(_ context.Context, f store.File) (store.File, error) {
	f.CreatedAt = time.Unix(1, 0)
	m.recs = append(m.recs, f)
	return f, nil
}

// CreateWithin is Create within a quota of maxBytes (0: none).
func (m *memFiles) CreateWithin(ctx context.Context, f store.File, maxBytes int64) (store.File, error) {
	if used, _ := m.Used(ctx, f.Scope); maxBytes > 0 && used+f.Bytes > maxBytes {
		return store.File{}, store.ErrQuota
	}
	return m.Create(ctx, f)
}

func (m *memFiles) Used(_ context.Context, sc store.Scope) (n int64, err error) {
	for _, f := range m.recs {
		if f.Scope == sc {
			n += f.Bytes
		}
	}
	return n, nil
}

type memBlobs struct {
	store.Blobs
	blobs map[string][]byte
}

func (m *memBlobs) Put(_ context.Context, id string, r io.Reader, maxBytes int64) (store.BlobInfo, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		return store.BlobInfo{}, err
	}
	if int64(len(b)) > maxBytes {
		return store.BlobInfo{}, store.ErrTooLarge
	}
	m.blobs[id] = b
	return store.BlobInfo{Bytes: int64(len(b))}, nil
}

func (m *memBlobs) Delete(_ context.Context, id string) error {
	if _, ok := m.blobs[id]; !ok {
		return store.ErrNotFound
	}
	delete(m.blobs, id)
	return nil
}

// FuzzMultipartUpload: a multipart upload (the body and its Content-Type
// as a client may send them) to the workspace's files either is stored —
// one blob with one record of the same id and size, in every API's shape
// — or is refused with a 4xx that leaves no blob and no record behind.
// Each file part's name, read as a container upload reads it
// (uploadName, then uploadDest), is a base name, and the path it makes
// one the home's own check takes as it is. The corpus is in
// testdata/fuzz/FuzzMultipartUpload.
func FuzzMultipartUpload(f *testing.F) {
	f.Fuzz(func(t *testing.T, contentType string, body []byte, route byte) {
		files, blobs := &memFiles{}, &memBlobs{blobs: map[string][]byte{}}
		s := &Server{cfg: Config{Files: files, Blobs: blobs, MaxUploadBytes: 64}}
		r := httptest.NewRequest("POST", "/v1/files", bytes.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		w := httptest.NewRecorder()
		err := s.uploadFileRoute(w, r, Principal{Account: "a", Workspace: "w"}, shape(route%3))
		if err != nil {
			clientError(t, body, err)
			if len(blobs.blobs) != 0 || len(files.recs) != 0 {
				t.Fatalf("%q refused (%v) but left %d blobs, %d records", body, err, len(blobs.blobs), len(files.recs))
			}
		} else {
			if w.Code != http.StatusOK || len(files.recs) != 1 || len(blobs.blobs) != 1 {
				t.Fatalf("%q stored as %d, %d blobs, %d records", body, w.Code, len(blobs.blobs), len(files.recs))
			}
			rec := files.recs[0]
			if b, ok := blobs.blobs[rec.ID]; !ok || int64(len(b)) != rec.Bytes || rec.Name == "" || strings.Contains(rec.Name, "/") {
				t.Fatalf("%q: record %+v for blobs %v", body, rec, blobs.blobs)
			}
		}
		// The names of the file parts, as the container upload reads them.
		r = httptest.NewRequest("POST", "/v1/containers/c/files", bytes.NewReader(body))
		r.Header.Set("Content-Type", contentType)
		mr, err := multipartReader(r)
		if err != nil {
			return
		}
		for range 8 {
			part, err := nextPart(mr)
			if err != nil {
				if err != io.EOF {
					clientError(t, body, err)
				}
				return
			}
			name := uploadName(part)
			if name != "" && (strings.ContainsAny(name, "/\x00") || name == "." || name == ".." || len(name) > 255) {
				t.Fatalf("%q: upload name %q", body, name)
			}
			for _, dest := range []string{"", "d/", runtime.HomeDir + "/", "/mnt/data/x/"} {
				rel, err := uploadDest(dest, name)
				if err != nil {
					clientError(t, body, err)
					continue
				}
				if clean, err := homefs.CleanRel(rel); err != nil || clean != rel {
					t.Fatalf("%q: upload of %q to %q is %q, which the home takes as %q (%v)", body, name, dest, rel, clean, err)
				}
			}
		}
	})
}
