package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

// Container files: the regular files in a container's home, in two shapes.
//
//	/api/v1/containers/{id}/files…   OpenRouter's (wire-formats §1.4): paths
//	                                 relative to the home ("out/report.csv"),
//	                                 limit 1–1000 (default 100), ascending
//	                                 path order, plus …/promote
//	/v1/containers/{id}/files…       OpenAI's (§2.6): paths as its hosted
//	                                 containers show them ("/mnt/data/out/
//	                                 report.csv"), limit 1–100 (default 20),
//	                                 order asc|desc (default desc, by path),
//	                                 upload of a workspace file by file_id
//
// A file's id is "cfile_" + base64url(path relative to the home, no
// padding): stable, needs no record, and names the file whatever its
// bytes (names with newlines or invalid UTF-8 included). Listings are in
// lexicographic byte order of paths, which is also the order of `after`.
// `source` is "user" for a file uploaded through the API (and not since
// replaced by a command), else "assistant".
//
// Each call holds the container like an exec call: its call lock (waiting
// at most CallWait, then 409) and the delete check. A sleeping container
// is not started: its home is mounted alone for the call.

// ContainerFile is a container file on the wire.
type ContainerFile struct {
	ID          string `json:"id"`
	Object      string `json:"object"` // "container.file"
	ContainerID string `json:"container_id"`
	Path        string `json:"path"`
	Bytes       int64  `json:"bytes"`
	CreatedAt   int64  `json:"created_at"`
	Source      string `json:"source"` // "user" or "assistant"
}

// openAIDataDir is where OpenAI's hosted containers keep files; the /v1
// routes show paths below it (inside Shellgate's sandboxes it names the
// home too).
const openAIDataDir = "/mnt/data"

// CFileID is the id of the file at rel (relative to the home).
func CFileID(rel string) string {
	return "cfile_" + base64.RawURLEncoding.EncodeToString([]byte(rel))
}

// ParseCFileID returns the home-relative path a cfile id names; the id
// must be the only one of its path (no padding, clean path).
func ParseCFileID(id string) (string, error) { return parseCFile(id, false) }

// parseCursor parses a listing's `after`: a cfile id, or one of a
// directory's path with a trailing "/" (where a scan cut short stopped).
func parseCursor(id string) (string, error) { return parseCFile(id, true) }

func parseCFile(id string, dirOK bool) (string, error) {
	enc, ok := strings.CutPrefix(id, "cfile_")
	if !ok {
		return "", fmt.Errorf("file id %q does not start with cfile_", id)
	}
	if len(enc) > base64.RawURLEncoding.EncodedLen(sandbox.MaxPathBytes) {
		return "", fmt.Errorf("file id is too long")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("file id %q: not cfile_ and unpadded base64url: %v", id, err)
	}
	rel := string(b)
	if dirOK && strings.HasSuffix(rel, "/") {
		if _, err := parseCFile(CFileID(strings.TrimSuffix(rel, "/")), false); err != nil {
			return "", err
		}
		return rel, nil
	}
	if rel == "" || strings.ContainsRune(rel, 0) || path.IsAbs(rel) || path.Clean(rel) != rel || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("file id %q does not name a path inside the home", id)
	}
	return rel, nil
}

func (s *Server) containerFile(containerID string, fi sandbox.FileInfo, sh shape) ContainerFile {
	src := "assistant"
	if fi.Uploaded {
		src = "user"
	}
	p := fi.Path
	if sh == shapeOpenAI {
		p = openAIDataDir + "/" + p
	}
	return ContainerFile{ID: CFileID(fi.Path), Object: "container.file", ContainerID: containerID, Path: p,
		Bytes: fi.Size, CreatedAt: fi.ModTime.Unix(), Source: src}
}

// ListContainerFiles lists one page of the regular files in container
// containerID's home (the store's id, already resolved in the caller's
// workspace) as OpenRouter-shaped objects; next is the `after` of the next
// page when more is set. A container without a home has no files. The
// caller holds the container as a call does (the handlers take its call
// lock); this never starts it.
func (s *Server) ListContainerFiles(ctx context.Context, containerID string, opts sandbox.ListOptions) (files []ContainerFile, more bool, next string, err error) {
	l, err := s.mgr.ListFiles(ctx, containerID, opts)
	if errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrDestroyed) {
		return []ContainerFile{}, false, "", nil
	}
	if err != nil {
		return nil, false, "", err
	}
	files = make([]ContainerFile, 0, len(l.Files))
	for _, fi := range l.Files {
		files = append(files, s.containerFile(containerID, fi, shapeOpenRouter))
	}
	if l.More {
		next = CFileID(l.Next)
	}
	return files, l.More, next, nil
}

// CopyWorkspaceFileIn copies workspace file fileID of p's workspace into
// container containerID's home at rel ("" = the file's own name at the
// top of the home) and describes the copy. An unknown file (or another
// workspace's) is ErrNotFound. Same holding rule as ListContainerFiles.
func (s *Server) CopyWorkspaceFileIn(ctx context.Context, p Principal, containerID, fileID, rel string) (sandbox.FileInfo, error) {
	f, rc, err := s.openWorkspaceFile(ctx, p, fileID)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	defer rc.Close()
	if rel == "" {
		if rel = safeName(f.Name); rel == "" {
			rel = f.ID
		}
	}
	return s.mgr.PutFile(ctx, containerID, rel, rc)
}

// PromoteContainerFile copies the file at rel in container containerID's
// home into p's workspace files (which never expire), with Source
// "container:<id>". Same holding rule as ListContainerFiles.
func (s *Server) PromoteContainerFile(ctx context.Context, p Principal, containerID, rel string) (store.File, error) {
	if s.cfg.Files == nil || s.cfg.Blobs == nil {
		return store.File{}, errors.New("workspace files are not configured")
	}
	f, err := s.mgr.OpenFile(ctx, containerID, rel, s.cfg.MaxFileBytes)
	if err != nil {
		return store.File{}, err
	}
	defer f.Close()
	return s.storeFile(ctx, p, f, path.Base(rel), "user_data", "container:"+containerID, s.cfg.MaxFileBytes)
}

// safeName is a file name fit for a record and a header: valid UTF-8 and
// at most store.MaxName bytes; "" if nothing is left.
func safeName(name string) string {
	name = strings.ToValidUTF8(path.Base(name), "_")
	for len(name) > store.MaxName {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name == "." || name == "/" || name == ".." {
		return ""
	}
	return name
}

// holdContainer resolves {id} in p's workspace and holds the container as
// an exec call does: its call lock (bounded wait, then 409) and the
// delete check. release must be called when the request is done with it.
func (s *Server) holdContainer(r *http.Request, p Principal) (Container, func(), error) {
	ref := r.PathValue("id")
	c, err := s.lookup(r.Context(), p, ref)
	if err != nil {
		return Container{}, nil, err
	}
	release, ok := s.calls.acquire(r.Context(), c.ID, s.cfg.CallWait)
	if !ok {
		if r.Context().Err() != nil {
			return Container{}, nil, errorf(http.StatusServiceUnavailable, "request ended while waiting for the container")
		}
		return Container{}, nil, errorf(http.StatusConflict, "container %q is running another call; calls on one container run one at a time and this one waited %s", ref, s.cfg.CallWait)
	}
	if !s.beginActive(c.ID) {
		release()
		return Container{}, nil, notFound(ref)
	}
	// A delete may have won while this call waited.
	if _, err := s.lookup(r.Context(), p, c.ID); err != nil {
		s.endActive(c.ID)
		release()
		return Container{}, nil, err
	}
	return c, func() { s.endActive(c.ID); release() }, nil
}

// fileErr maps a sandbox file call's error to an answer.
func (s *Server) fileErr(err error, ref, what string) error {
	var ae *apiError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return err
	case errors.Is(err, sandbox.ErrDestroyed):
		return notFound(ref)
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrFileNotFound):
		return errorf(http.StatusNotFound, "no file %s in container %q", what, ref)
	case errors.Is(err, sandbox.ErrBadPath):
		return errorf(http.StatusBadRequest, "%v", err)
	case errors.Is(err, sandbox.ErrNotRegular):
		return errorf(http.StatusBadRequest, "%s is not a regular file: only regular files are served (%v)", what, err)
	case errors.Is(err, sandbox.ErrTooLarge):
		return errorf(http.StatusUnprocessableEntity, "%v", err)
	case errors.Is(err, sandbox.ErrTooManyFiles):
		return errorf(http.StatusUnprocessableEntity, "%v; list it with a command instead", err)
	case errors.Is(err, errUploadTooLarge), errors.Is(err, store.ErrTooLarge):
		return errorf(http.StatusRequestEntityTooLarge, "%v", err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errorf(http.StatusRequestEntityTooLarge, "the container's home is full")
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EEXIST):
		return errorf(http.StatusBadRequest, "cannot write %s: a directory or file is in the way", what)
	case errors.Is(err, sandbox.ErrDiskReserve):
		return errorf(http.StatusInsufficientStorage, "the server is low on disk space; try again later")
	case errors.Is(err, sandbox.ErrBusy):
		return errorf(http.StatusConflict, "container %q is in use by another shellgate process", ref)
	case errors.Is(err, sandbox.ErrClosed):
		return errorf(http.StatusServiceUnavailable, "the server is shutting down")
	case errors.Is(err, sandbox.ErrNotSupported):
		return errorf(http.StatusNotImplemented, "%v", err)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || errors.Is(err, io.ErrUnexpectedEOF) {
		return bodyError(err)
	}
	return err
}

// onContainerFile makes a route on one of the container's files: the
// file's path, from {file_id}, is checked first, then the container is held
// (holdContainer) while h runs, and h's sandbox errors are answered as
// fileErr says.
func (s *Server) onContainerFile(h func(w http.ResponseWriter, r *http.Request, c Container, rel string, sh shape) error) func(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error {
	return func(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error {
		rel, err := fileParam(r)
		if err != nil {
			return err
		}
		c, release, err := s.holdContainer(r, p)
		if err != nil {
			return err
		}
		defer release()
		return s.fileErr(h(w, r, c, rel, sh), r.PathValue("id"), r.PathValue("file_id"))
	}
}

// fileParam parses {file_id}.
func fileParam(r *http.Request) (string, error) {
	rel, err := ParseCFileID(r.PathValue("file_id"))
	if err != nil {
		return "", errorf(http.StatusBadRequest, "%v", err)
	}
	return rel, nil
}

func (s *Server) listContainerFilesRoute(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error {
	q := r.URL.Query()
	limit, maxLimit := 100, sandbox.MaxListLimit
	opts := sandbox.ListOptions{}
	if sh == shapeOpenAI {
		limit, maxLimit, opts.Desc = 20, 100, true
	}
	for k := range q {
		switch k {
		case "limit", "after":
		case "order":
			if sh == shapeOpenAI {
				continue
			}
			fallthrough
		default:
			return errorf(http.StatusBadRequest, "unknown query parameter %q", k)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return errorf(http.StatusBadRequest, "limit %q: want an integer from 1 to %d", v, maxLimit)
		}
		limit = n
	}
	opts.Limit = limit
	switch q.Get("order") {
	case "":
	case "asc":
		opts.Desc = false
	case "desc":
		opts.Desc = true
	default:
		return errorf(http.StatusBadRequest, "order %q: want asc or desc", q.Get("order"))
	}
	if v := q.Get("after"); v != "" {
		rel, err := parseCursor(v)
		if err != nil {
			return errorf(http.StatusBadRequest, "after: %v", err)
		}
		opts.After = rel
	}
	c, release, err := s.holdContainer(r, p)
	if err != nil {
		return err
	}
	defer release()
	files, more, next, err := s.ListContainerFiles(r.Context(), c.ID, opts)
	if err != nil {
		return s.fileErr(err, r.PathValue("id"), "")
	}
	out := struct {
		Object  string          `json:"object"`
		Data    []ContainerFile `json:"data"`
		FirstID *string         `json:"first_id"`
		LastID  *string         `json:"last_id"`
		HasMore bool            `json:"has_more"`
	}{Object: "list", Data: files, HasMore: more}
	for i := range out.Data {
		if sh == shapeOpenAI {
			out.Data[i].Path = openAIDataDir + "/" + out.Data[i].Path
		}
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[n-1].ID
	}
	if more && next != "" {
		// The scan may have stopped past the last file listed: resume there.
		out.LastID = &next
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getContainerFile(w http.ResponseWriter, r *http.Request, c Container, rel string, sh shape) error {
	fi, err := s.mgr.StatFile(r.Context(), c.ID, rel)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.containerFile(c.ID, fi, sh))
	return nil
}

func (s *Server) containerFileContent(w http.ResponseWriter, r *http.Request, c Container, rel string, _ shape) error {
	f, err := s.mgr.OpenFile(r.Context(), c.ID, rel, s.cfg.MaxFileBytes)
	if err != nil {
		return err
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(f.Size, 10))
	h.Set("Content-Disposition", attachment(path.Base(rel)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, f); err != nil {
		// The status is sent: the client sees a short body.
		s.log.InfoContext(r.Context(), "container file download ended early", "container", c.ID, "err", err)
	}
	return nil
}

func (s *Server) deleteContainerFile(w http.ResponseWriter, r *http.Request, c Container, rel string, _ shape) error {
	if err := s.mgr.RemoveFile(r.Context(), c.ID, rel); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": CFileID(rel), "object": "container.file.deleted", "deleted": true})
	return nil
}

// uploadContainerFileRoute writes a file into the home: multipart with a
// `file` part (and, before it, an optional `path`: where in the home, a
// directory when it ends in "/"), or — OpenAI's way of copying a
// workspace file in — a `file_id` field, as multipart or as JSON
// {"file_id"}. Parts after `file` are not read. The file streams into the
// home (temporary file, renamed into place when complete) with the upload
// cap.
func (s *Server) uploadContainerFileRoute(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error {
	ref := r.PathValue("id")
	var fileID, dest string
	var mr *multipart.Reader
	ct := r.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/json") {
		var req struct {
			FileID *string `json:"file_id"`
			Path   *string `json:"path"`
		}
		if err := decodeJSON(r, &req, false); err != nil {
			return err
		}
		if req.FileID == nil || *req.FileID == "" {
			return errorf(http.StatusBadRequest, "file_id is required in a JSON body (upload bytes as multipart/form-data with a `file` part)")
		}
		fileID = *req.FileID
		if req.Path != nil {
			dest = *req.Path
		}
	} else {
		var err error
		if mr, err = multipartReader(r); err != nil {
			return err
		}
	}
	c, release, err := s.holdContainer(r, p)
	if err != nil {
		return err
	}
	defer release()
	ctx := r.Context()
	var fi sandbox.FileInfo
	wrote := false
	if mr != nil {
		for !wrote {
			part, err := nextPart(mr)
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			switch part.FormName() {
			case "path":
				if dest, err = readField(part); err != nil {
					return err
				}
			case "file_id":
				if fileID, err = readField(part); err != nil {
					return err
				}
			case "file":
				if fileID != "" {
					return errorf(http.StatusBadRequest, "send either a `file` part or a file_id, not both")
				}
				name := uploadName(part)
				rel, err := uploadDest(dest, name)
				if err != nil {
					return err
				}
				if fi, err = s.mgr.PutFile(ctx, c.ID, rel, &capReader{r: part, max: s.cfg.MaxUploadBytes}); err != nil {
					return s.fileErr(err, ref, strconv.Quote(rel))
				}
				wrote = true
			default:
				return errorf(http.StatusBadRequest, "unknown form field %q (want file, path or file_id)", part.FormName())
			}
		}
	}
	if !wrote {
		if fileID == "" {
			return errorf(http.StatusBadRequest, "no `file` part in the multipart body (and no file_id)")
		}
		rel := ""
		if dest != "" {
			var err error
			if rel, err = uploadDest(dest, ""); err != nil {
				return err
			}
		}
		if fi, err = s.CopyWorkspaceFileIn(ctx, p, c.ID, fileID, rel); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return errorf(http.StatusNotFound, "no file %q", fileID)
			}
			return s.fileErr(err, ref, strconv.Quote(rel))
		}
	}
	writeJSON(w, http.StatusOK, s.containerFile(c.ID, fi, sh))
	return nil
}

// uploadDest is where an upload goes in the home: dest (relative, or
// absolute under /workspace/home or /mnt/data; a directory when it ends
// in "/" or is empty) joined with the file's name.
func uploadDest(dest, name string) (string, error) {
	d := dest
	for _, prefix := range []string{runtime.HomeDir, openAIDataDir} {
		if d == prefix {
			d = ""
		} else if rest, ok := strings.CutPrefix(d, prefix+"/"); ok {
			d = rest
		}
	}
	if d == "." {
		d = "" // the home itself, as the prefixes above
	}
	if d == "" || strings.HasSuffix(d, "/") {
		if name == "" {
			return "", errorf(http.StatusBadRequest, "the file has no usable name: send a `path` field before `file`")
		}
		d += name
	}
	if path.IsAbs(d) || strings.ContainsRune(d, 0) || path.Clean(d) != strings.TrimSuffix(d, "/") || d == ".." || strings.HasPrefix(d, "../") || strings.Contains(d, "/../") {
		return "", errorf(http.StatusBadRequest, "path %q: want a path inside %s (or %s), without '..'", dest, runtime.HomeDir, openAIDataDir)
	}
	return d, nil
}

// promoteContainerFileRoute copies a container file into the workspace's
// durable files and answers the new file (OpenRouter's FileResponse).
func (s *Server) promoteContainerFileRoute(w http.ResponseWriter, r *http.Request, p Principal, sh shape) error {
	if err := noBody(r); err != nil {
		return err
	}
	rel, err := fileParam(r)
	if err != nil {
		return err
	}
	if s.cfg.Files == nil || s.cfg.Blobs == nil {
		return errorf(http.StatusNotFound, "workspace files are not enabled on this server")
	}
	c, release, err := s.holdContainer(r, p)
	if err != nil {
		return err
	}
	defer release()
	f, err := s.PromoteContainerFile(r.Context(), p, c.ID, rel)
	if err != nil {
		return s.fileErr(err, r.PathValue("id"), r.PathValue("file_id"))
	}
	writeJSON(w, http.StatusOK, s.fileObject(f, shapeOpenRouter))
	return nil
}

// noBody refuses a body on a route that takes none (JSON {} is allowed).
func noBody(r *http.Request) error {
	var v struct{}
	return decodeJSON(r, &v, true)
}
