package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellgate/shellgate/internal/gateway"
)

// fileTemplate is the URI of a container's file; FileURI makes one.
const fileTemplate = "shellgate://containers/{id}/files/{+path}"

const filePrefix = "shellgate://containers/"

// FileURI is the resource URI of the file at rel (relative to the home)
// in container id: each path segment escaped.
func FileURI(id, rel string) string {
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return filePrefix + url.PathEscape(id) + "/files/" + strings.Join(segs, "/")
}

// parseFileURI is FileURI's inverse.
func parseFileURI(uri string) (id, rel string, ok bool) {
	rest, ok := strings.CutPrefix(uri, filePrefix)
	if !ok {
		return "", "", false
	}
	id, p, ok := strings.Cut(rest, "/files/")
	if !ok || id == "" || p == "" {
		return "", "", false
	}
	id, err1 := url.PathUnescape(id)
	rel, err2 := url.PathUnescape(p)
	return id, rel, err1 == nil && err2 == nil
}

// readResource reads a file resource: the container is held like a tool
// call's (its own, or any of the workspace's by id), the file read with
// read_file's cap. A file or container that is not there is the
// protocol's resource-not-found error.
func (ss *session) readResource(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	id, rel, ok := parseFileURI(uri)
	if !ok {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	ws, err := workspaceOf(req)
	if err != nil {
		return nil, err
	}
	b, err := ws.Open(ctx, id, req.Session.ID())
	if err != nil {
		return nil, notFoundOr(uri, err)
	}
	data, err := b.ReadFile(ctx, rel, MaxFileBytes)
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, notFoundOr(uri, err)
	}
	rc := &sdk.ResourceContents{URI: uri, MIMEType: mimeOf(rel, data)}
	if utf8.Valid(data) {
		rc.Text = string(data)
	} else {
		rc.Blob = data
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{rc}}, nil
}

func notFoundOr(uri string, err error) error {
	if re := (*gateway.RequestError)(nil); errors.As(err, &re) && re.Status == http.StatusNotFound {
		return sdk.ResourceNotFoundError(uri)
	}
	return toolErr(err)
}

func mimeOf(rel string, data []byte) string {
	if t := mime.TypeByExtension(path.Ext(rel)); t != "" {
		return t
	}
	return http.DetectContentType(data)
}

// listOnce publishes the files of b's container (the first page) as
// resources the first time the session uses it.
func (ss *session) listOnce(ctx context.Context, b Box) {
	id := b.ContainerID()
	ss.mu.Lock()
	done := ss.listed[id]
	if ss.listed == nil {
		ss.listed = map[string]bool{}
	}
	ss.listed[id] = true
	ss.mu.Unlock()
	if done {
		return
	}
	files, _, err := b.ListFiles(ctx, "", 100)
	if err != nil {
		return // the listing is a courtesy; the template reads any file
	}
	for _, f := range files {
		ss.add(id, f.Path, f.Bytes)
	}
}

// changed publishes the files a call changed (which sends list_changed)
// and returns their paths.
func (ss *session) changed(_ context.Context, b Box, files []gateway.ChangedFile) []string {
	var paths []string
	for _, f := range files {
		ss.add(b.ContainerID(), f.Path, f.Bytes)
		paths = append(paths, f.Path)
	}
	return paths
}

// publish adds files written through the host (write_file).
func (ss *session) publish(_ context.Context, b Box, rels []string) {
	for _, rel := range rels {
		ss.add(b.ContainerID(), path.Clean(rel), 0)
	}
}

func (ss *session) add(id, rel string, size int64) {
	ss.srv.AddResource(&sdk.Resource{URI: FileURI(id, rel), Name: rel, Title: path.Base(rel),
		MIMEType: mime.TypeByExtension(path.Ext(rel)), Size: size}, ss.readResource)
}

// jsonText is v as JSON text content (encoding a result cannot fail).
func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// jsonRaw is v as raw JSON ("" for nil).
func jsonRaw(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	return json.Marshal(v)
}
