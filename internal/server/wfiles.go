package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

// Workspace files: durable files of a workspace that never expire (SPEC
// §3.5), bytes in a store.Blobs under the record's id.
//
//	/api/v1/files…   OpenRouter's shape: {_shape, id, type:"file", filename,
//	                 mime_type, size_bytes, created_at (RFC 3339), downloadable};
//	                 lists {_shape, data, first_id, last_id, has_more, cursor},
//	                 deletes {_shape, id, type:"file_deleted", deleted}
//	/v1/files…       Anthropic's shape (§3.5) when the request carries
//	                 anthropic-version, else OpenAI's ({id, object:"file",
//	                 bytes, created_at (unix), filename, purpose, status})
//
// Uploads are multipart (`file`, and `purpose` on OpenAI's), streamed to
// the blob store with the upload cap; the record is written once the whole
// body was read, so a refused upload keeps nothing. Listings are newest
// first unless order=asc.

// Upload and download caps (Config.MaxUploadBytes, Config.MaxFileBytes).
const (
	DefaultMaxUploadBytes = 512 << 20
	DefaultMaxFileBytes   = 5 << 30
)

// orFile is the OpenRouter shape: Anthropic's fields, marked, with the
// purpose and source.
type orFile struct {
	Shape string `json:"_shape"` // "openrouter"
	anthropicFile
	Purpose string `json:"purpose,omitempty"`
	Source  string `json:"source,omitempty"`
}

type anthropicFile struct {
	ID           string `json:"id"`
	Type         string `json:"type"` // "file"
	Filename     string `json:"filename"`
	MimeType     string `json:"mime_type"`
	SizeBytes    int64  `json:"size_bytes"`
	CreatedAt    string `json:"created_at"`
	Downloadable bool   `json:"downloadable"`
}

type openAIFile struct {
	ID        string `json:"id"`
	Object    string `json:"object"` // "file"
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"` // "processed"
}

func (s *Server) fileObject(f store.File, sh shape) any {
	if sh == shapeOpenAI {
		return openAIFile{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt.Unix(), Filename: f.Name, Purpose: f.Purpose, Status: "processed"}
	}
	af := anthropicFile{ID: f.ID, Type: "file", Filename: f.Name, MimeType: mimeOf(f.Name), SizeBytes: f.Bytes,
		CreatedAt: f.CreatedAt.UTC().Format(time.RFC3339Nano), Downloadable: true}
	if sh == shapeAnthropic {
		return af
	}
	return orFile{Shape: "openrouter", anthropicFile: af, Purpose: f.Purpose, Source: f.Source}
}

// storeFile streams r (at most maxBytes) into a new workspace file of p's
// workspace: the blob first, then the record under the same id. Over the
// workspace's file quota it is the quota's 403, and nothing is kept.
func (s *Server) storeFile(ctx context.Context, p Principal, r io.Reader, name, purpose, source string, maxBytes int64) (store.File, error) {
	room, err := s.fileRoom(ctx, p, maxBytes)
	if err != nil {
		return store.File{}, err
	}
	id := store.NewID("file")
	info, err := s.cfg.Blobs.Put(ctx, id, r, room)
	if errors.Is(err, store.ErrTooLarge) && room < maxBytes {
		return store.File{}, s.fileQuota(ctx, p)
	}
	if err != nil {
		return store.File{}, err
	}
	if name = safeName(name); name == "" {
		name = id
	}
	return s.createFile(ctx, p, store.File{ID: id, Scope: scope(p), Name: name, Bytes: info.Bytes, SHA256: info.SHA256, Purpose: purpose, Source: source})
}

// fileRoom is the most bytes a new file of p's workspace may have: at
// most maxBytes, and no more than its file quota leaves (a workspace at
// its quota is refused here, before any byte is read). A file that fits
// the room may still be refused by createFile, when files stored
// meanwhile took the room.
func (s *Server) fileRoom(ctx context.Context, p Principal, maxBytes int64) (int64, error) {
	max := s.cfg.MaxWorkspaceFileBytes
	if max <= 0 {
		return maxBytes, nil
	}
	used, err := s.cfg.Files.Used(ctx, scope(p))
	if err != nil {
		return 0, fmt.Errorf("workspace file quota: %w", err)
	}
	if used >= max {
		return 0, fileBytesQuota(max, used)
	}
	return min(maxBytes, max-used), nil
}

// fileQuota is the file quota's 403 for p's workspace.
func (s *Server) fileQuota(ctx context.Context, p Principal) error {
	used, err := s.cfg.Files.Used(ctx, scope(p))
	if err != nil {
		used = -1
	}
	return fileBytesQuota(s.cfg.MaxWorkspaceFileBytes, used)
}

// createFile records f, whose blob is stored, within its workspace's file
// quota; when the record is refused, the blob is deleted.
func (s *Server) createFile(ctx context.Context, p Principal, f store.File) (store.File, error) {
	created, err := s.cfg.Files.CreateWithin(ctx, f, s.cfg.MaxWorkspaceFileBytes)
	if err != nil {
		derr := s.cfg.Blobs.Delete(context.WithoutCancel(ctx), f.ID)
		if errors.Is(err, store.ErrQuota) {
			if derr != nil {
				s.log.ErrorContext(ctx, "deleting the bytes of a file over the quota failed", "file", f.ID, "err", derr)
			}
			return store.File{}, s.fileQuota(ctx, p)
		}
		return store.File{}, errors.Join(fmt.Errorf("record file: %w", err), derr)
	}
	return created, nil
}

// openWorkspaceFile returns file id of p's workspace and its bytes;
// another workspace's file is store.ErrNotFound like a missing one.
func (s *Server) openWorkspaceFile(ctx context.Context, p Principal, id string) (store.File, io.ReadCloser, error) {
	if s.cfg.Files == nil || s.cfg.Blobs == nil {
		return store.File{}, nil, fmt.Errorf("workspace files are not configured: %w", store.ErrNotFound)
	}
	if !store.ValidBlobID(id) {
		return store.File{}, nil, fmt.Errorf("file %q: %w", id, store.ErrNotFound)
	}
	f, err := s.cfg.Files.Get(ctx, scope(p), id)
	if err != nil {
		return store.File{}, nil, err
	}
	rc, _, err := s.cfg.Blobs.Open(ctx, id)
	if err != nil {
		return store.File{}, nil, err
	}
	return f, rc, nil
}

func (s *Server) filesEnabled() error {
	if s.cfg.Files == nil || s.cfg.Blobs == nil {
		return errorf(http.StatusNotFound, "workspace files are not enabled on this server")
	}
	return nil
}

func noFile(id string) error { return errorf(http.StatusNotFound, "no file %q", id) }

// workspaceFile reads {file_id} of p's workspace.
func (s *Server) workspaceFile(r *http.Request, p Principal) (store.File, error) {
	if err := s.filesEnabled(); err != nil {
		return store.File{}, err
	}
	id := r.PathValue("file_id")
	if !store.ValidBlobID(id) {
		return store.File{}, noFile(id)
	}
	f, err := s.cfg.Files.Get(r.Context(), scope(p), id)
	if errors.Is(err, store.ErrNotFound) {
		return store.File{}, noFile(id)
	}
	return f, err
}

func (s *Server) uploadFileRoute(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error {
	if err := s.filesEnabled(); err != nil {
		return err
	}
	mr, err := multipartReader(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	purpose := ""
	var f store.File
	var pending string // the blob written, before its record
	for {
		part, err := nextPart(mr)
		if err == io.EOF {
			break
		}
		if err != nil {
			if pending != "" {
				s.cfg.Blobs.Delete(context.WithoutCancel(ctx), pending)
			}
			return err
		}
		switch name := part.FormName(); {
		case name == "purpose":
			v, err := readField(part)
			if err == nil && (v == "" || len(v) > 64) {
				err = errorf(http.StatusBadRequest, "purpose %q: want 1-64 characters", v)
			}
			if err != nil {
				if pending != "" {
					s.cfg.Blobs.Delete(context.WithoutCancel(ctx), pending)
				}
				return err
			}
			purpose = v
		case name == "expires_after[anchor]" || name == "expires_after[seconds]" || name == "expires_in_seconds":
			// Workspace files never expire (SPEC §3.5).
			readField(part)
		case name == "file" && pending == "":
			fname := uploadName(part)
			if fname == "" {
				fname = "upload"
			}
			room, err := s.fileRoom(ctx, p, s.cfg.MaxUploadBytes)
			if err != nil {
				return err
			}
			id := store.NewID("file")
			src := &bodyReader{r: part}
			info, err := s.cfg.Blobs.Put(ctx, id, src, room)
			if errors.Is(err, store.ErrTooLarge) && room < s.cfg.MaxUploadBytes {
				return s.fileQuota(ctx, p)
			}
			if errors.Is(err, store.ErrTooLarge) {
				return errorf(http.StatusRequestEntityTooLarge, "the file is larger than the %d-byte upload cap", s.cfg.MaxUploadBytes)
			}
			if err != nil {
				if ae := bodyError(err); errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, new(*http.MaxBytesError)) || errors.As(err, new(*bodyStallError)) {
					return ae
				}
				if ctx.Err() != nil {
					return errorf(http.StatusBadRequest, "the upload ended early")
				}
				if src.err != nil {
					// The part itself could not be read (a quoted-printable
					// part with bytes that encoding does not allow): the
					// client's error, not the store's.
					return bodyError(src.err)
				}
				return fmt.Errorf("store upload: %w", err)
			}
			pending = id
			f = store.File{ID: id, Scope: scope(p), Name: safeName(fname), Bytes: info.Bytes, SHA256: info.SHA256, Source: "upload"}
		default:
			if pending != "" {
				s.cfg.Blobs.Delete(context.WithoutCancel(ctx), pending)
			}
			return errorf(http.StatusBadRequest, "unexpected form field %q (want one file, and purpose)", name)
		}
	}
	if pending == "" {
		return errorf(http.StatusBadRequest, "no `file` part in the multipart body")
	}
	if purpose == "" {
		purpose = "user_data"
	}
	f.Purpose = purpose
	if f.Name == "" {
		f.Name = f.ID
	}
	created, err := s.createFile(ctx, p, f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.fileObject(created, sh))
	return nil
}

func (s *Server) listFilesRoute(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error {
	if err := s.filesEnabled(); err != nil {
		return err
	}
	q := r.URL.Query()
	opts := store.ListOptions{Limit: 100, Order: store.Desc}
	allowed := map[string]bool{"limit": true, "after": true, "order": true}
	maxLimit := store.MaxPageSize
	switch sh {
	case shapeOpenAI:
		opts.Limit, maxLimit = store.MaxPageSize, 10000
		allowed["purpose"] = false // known, not supported
	case shapeAnthropic:
		opts.Limit = 20
		allowed = map[string]bool{"limit": true, "after_id": true, "page": true, "beta": true, "before_id": false}
	case shapeOpenRouter:
		allowed["cursor"] = true // the list's cursor, as after
	}
	for k := range q {
		if ok, known := allowed[k]; !ok {
			if known {
				return errorf(http.StatusBadRequest, "query parameter %q is not supported here", k)
			}
			return errorf(http.StatusBadRequest, "unknown query parameter %q", k)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return errorf(http.StatusBadRequest, "limit %q: want an integer from 1 to %d", v, maxLimit)
		}
		opts.Limit = min(n, store.MaxPageSize)
	}
	if v := q.Get("order"); v != "" {
		if v != store.Asc && v != store.Desc {
			return errorf(http.StatusBadRequest, "order %q: want asc or desc", v)
		}
		opts.Order = v
	}
	opts.After = q.Get("after")
	if sh == shapeAnthropic {
		opts.After = q.Get("after_id")
		if v := q.Get("page"); v != "" {
			opts.After = v
		}
	}
	if v := q.Get("cursor"); sh == shapeOpenRouter && v != "" {
		opts.After = v
	}
	if opts.After != "" && !store.ValidBlobID(opts.After) {
		return errorf(http.StatusBadRequest, "cursor %q is not a file id", opts.After)
	}
	page, err := s.cfg.Files.List(r.Context(), scope(p), opts)
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid):
		return errorf(http.StatusBadRequest, "cursor %q is not a file of this workspace", opts.After)
	case err != nil:
		return fmt.Errorf("list files: %w", err)
	}
	data := make([]any, 0, len(page.Items))
	for _, f := range page.Items {
		data = append(data, s.fileObject(f, sh))
	}
	var first, last *string
	if n := len(page.Items); n > 0 {
		first, last = &page.Items[0].ID, &page.Items[n-1].ID
	}
	if sh == shapeAnthropic {
		var next *string
		if page.HasMore {
			next = last
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": data, "first_id": first, "last_id": last, "has_more": page.HasMore, "next_page": next})
		return nil
	}
	list := map[string]any{"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": page.HasMore}
	if sh == shapeOpenRouter {
		// OpenRouter's SDK picks the list's shape by _shape and requires
		// cursor: the next page's (null on the last).
		var next *string
		if page.HasMore {
			next = last
		}
		list["_shape"], list["cursor"] = "openrouter", next
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) getFileRoute(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error {
	f, err := s.workspaceFile(r, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.fileObject(f, sh))
	return nil
}

func (s *Server) fileContentRoute(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error {
	f, err := s.workspaceFile(r, p)
	if err != nil {
		return err
	}
	rc, size, err := s.cfg.Blobs.Open(r.Context(), f.ID)
	if errors.Is(err, store.ErrNotFound) {
		return noFile(f.ID)
	}
	if err != nil {
		return fmt.Errorf("open file %s: %w", f.ID, err)
	}
	defer rc.Close()
	h := w.Header()
	if sh == shapeOpenRouter {
		// OpenRouter's download is bytes: its SDK takes no other type.
		h.Set("Content-Type", "application/octet-stream")
	} else {
		h.Set("Content-Type", mimeOf(f.Name))
	}
	h.Set("Content-Disposition", attachment(f.Name))
	h.Set("X-Content-Type-Options", "nosniff")
	if rs, ok := rc.(io.ReadSeeker); ok {
		// Range requests, and the length from the blob itself.
		http.ServeContent(w, r, "", f.CreatedAt, rs)
		return nil
	}
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	io.Copy(w, rc)
	return nil
}

func (s *Server) deleteFileRoute(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error {
	f, err := s.workspaceFile(r, p)
	if err != nil {
		return err
	}
	ctx := context.WithoutCancel(r.Context())
	if err := s.cfg.Files.Delete(ctx, scope(p), f.ID); errors.Is(err, store.ErrNotFound) {
		return noFile(f.ID)
	} else if err != nil {
		return fmt.Errorf("delete file %s: %w", f.ID, err)
	}
	if err := s.cfg.Blobs.Delete(ctx, f.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.ErrorContext(ctx, "deleting a deleted file's bytes failed", "file", f.ID, "err", err)
	}
	switch sh {
	case shapeAnthropic:
		writeJSON(w, http.StatusOK, map[string]any{"id": f.ID, "type": "file_deleted"})
		return nil
	case shapeOpenRouter:
		// The shape OpenRouter's SDK requires; deleted as before.
		writeJSON(w, http.StatusOK, map[string]any{"_shape": "openrouter", "id": f.ID, "type": "file_deleted", "deleted": true})
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": f.ID, "object": "file", "deleted": true})
	return nil
}

// fileRoutes registers the container-file and workspace-file routes.
func (s *Server) fileRoutes() {
	upload := s.cfg.MaxUploadBytes + 1<<20 // the multipart framing around the file
	or, oa := fixed(shapeOpenRouter), fixed(shapeOpenAI)
	for _, v := range []struct {
		prefix string
		// cf shapes the container-file answers, wf the workspace-file ones.
		cf, wf shapeFunc
	}{{"/api/v1", or, or}, {"/v1", oa, filesShape}} {
		s.handleAs("GET "+v.prefix+"/containers/{id}/files", maxEmptyBody, v.cf, s.listContainerFilesRoute)
		s.handleUploadAs("POST "+v.prefix+"/containers/{id}/files", upload, v.cf, s.uploadContainerFileRoute)
		s.handleAs("GET "+v.prefix+"/containers/{id}/files/{file_id}", maxEmptyBody, v.cf, s.onContainerFile(s.getContainerFile))
		s.handleAs("DELETE "+v.prefix+"/containers/{id}/files/{file_id}", maxEmptyBody, v.cf, s.onContainerFile(s.deleteContainerFile))
		s.handleAs("GET "+v.prefix+"/containers/{id}/files/{file_id}/content", maxEmptyBody, v.cf, s.onContainerFile(s.containerFileContent))
		s.handleUploadAs("POST "+v.prefix+"/files", upload, v.wf, s.uploadFileRoute)
		s.handleAs("GET "+v.prefix+"/files", maxEmptyBody, v.wf, s.listFilesRoute)
		s.handleAs("GET "+v.prefix+"/files/{file_id}", maxEmptyBody, v.wf, s.getFileRoute)
		s.handleAs("DELETE "+v.prefix+"/files/{file_id}", maxEmptyBody, v.wf, s.deleteFileRoute)
		s.handleAs("GET "+v.prefix+"/files/{file_id}/content", maxEmptyBody, v.wf, s.fileContentRoute)
	}
	s.handleAs("POST /api/v1/containers/{id}/files/{file_id}/promote", maxEmptyBody, or, s.promoteContainerFileRoute)
}
