package server

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"
)

// Uploads are multipart/form-data read part by part from the body as it
// arrives (r.MultipartReader, never ParseMultipartForm): a file part is
// streamed to its destination and never held whole in memory or on a
// temporary disk of the server's.

// maxFieldBytes caps a multipart part that is not a file (purpose, path,
// file_id).
const maxFieldBytes = 64 << 10

// multipartReader returns the request's multipart reader, or a 400 that
// says what is wrong with the body.
func multipartReader(r *http.Request) (*multipart.Reader, error) {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "multipart/form-data" {
		return nil, errorf(http.StatusBadRequest, "send multipart/form-data with a `file` part (Content-Type is %q)", ct)
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "malformed multipart body: %v", err)
	}
	return mr, nil
}

// nextPart is mr.NextPart with errors said plainly: io.EOF at the end, a
// 413 past the route's body cap, a 400 for a malformed body.
func nextPart(mr *multipart.Reader) (*multipart.Part, error) {
	p, err := mr.NextPart()
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil {
		return nil, bodyError(err)
	}
	return p, nil
}

// bodyError maps an error reading a request body to a 4xx: the route's
// cap (413), a body that stalled (408), or one cut short or malformed
// (400).
func bodyError(err error) error {
	if ae := bodyLimitError(err); ae != nil {
		return ae
	}
	switch {
	case errors.Is(err, errUploadTooLarge):
		return errorf(http.StatusRequestEntityTooLarge, "%v", err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, "malformed multipart body: it ends early")
	}
	return errorf(http.StatusBadRequest, "malformed multipart body: %v", err)
}

// bodyLimitError is the answer to a body read cut by one of the server's
// bounds — the route's cap (413) or a stall (408) — and nil for any other
// error, which each decoder words itself.
func bodyLimitError(err error) *apiError {
	var mbe *http.MaxBytesError
	var stall *bodyStallError
	switch {
	case errors.As(err, &mbe):
		return errorf(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", mbe.Limit)
	case errors.As(err, &stall):
		return errorf(http.StatusRequestTimeout, "%v", stall)
	}
	return nil
}

// readField reads a small form field.
func readField(p *multipart.Part) (string, error) {
	b, err := io.ReadAll(io.LimitReader(p, maxFieldBytes+1))
	if err != nil {
		return "", bodyError(err)
	}
	if len(b) > maxFieldBytes {
		return "", errorf(http.StatusBadRequest, "form field %q is longer than %d bytes", p.FormName(), maxFieldBytes)
	}
	return string(b), nil
}

var errUploadTooLarge = errors.New("upload too large")

// capReader fails once more than max bytes were read, so that a file part
// over the upload cap is refused while it streams.
type capReader struct {
	r   io.Reader
	max int64
	n   int64
}

func (c *capReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, fmt.Errorf("%w: the file is larger than the %d-byte upload cap", errUploadTooLarge, c.max)
	}
	return n, err
}

// uploadName is the name an uploaded file part gives itself, reduced to a
// base name; "" when it has none that can name a file.
func uploadName(p *multipart.Part) string {
	_, params, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	name := params["filename"]
	name = path.Base(strings.ReplaceAll(name, "\\", "/"))
	if name == "." || name == "/" || name == ".." || strings.ContainsRune(name, 0) || len(name) > 255 {
		return ""
	}
	return name
}

// mimeOf is the media type a file name suggests (no parameters), else
// application/octet-stream.
func mimeOf(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		if mt, _, err := mime.ParseMediaType(t); err == nil {
			return mt
		}
	}
	return "application/octet-stream"
}

// attachment is a Content-Disposition that names the file; names that
// cannot be said in a header (control characters, invalid UTF-8) are
// left out.
func attachment(name string) string {
	if v := mime.FormatMediaType("attachment", map[string]string{"filename": name}); v != "" {
		return v
	}
	return "attachment"
}
