package server

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/shellgate/shellgate/sandbox"
)

// part is one part of a multipart body built by multipartBody.
type part struct {
	name, filename, content string
}

func multipartBody(t testing.TB, parts ...part) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		var w io.Writer
		var err error
		if p.filename != "" {
			w, err = mw.CreateFormFile(p.name, p.filename)
		} else {
			w, err = mw.CreateFormField(p.name)
		}
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.content)
	}
	mw.Close()
	return buf.String(), mw.FormDataContentType()
}

// upload posts a multipart body with key A (or the key given).
func (e *env) upload(path, key string, parts ...part) (int, []byte) {
	e.t.Helper()
	body, ct := multipartBody(e.t, parts...)
	return e.doH("POST", path, body, map[string]string{"Authorization": "Bearer " + key, "Content-Type": ct})
}

// get answers a GET with key A: status, body and headers.
func (e *env) getRaw(path, key string) (int, []byte, http.Header) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	st, h, b := roundTrip(e.t, req)
	return st, b, h
}

// promote promotes the container's file rel with key A, which must
// succeed, and returns the new workspace file and the answer's body.
func (e *env) promote(ref, rel string) (orFile, []byte) {
	e.t.Helper()
	var f orFile
	st, b := e.do("POST", "/api/v1/containers/"+ref+"/files/"+CFileID(rel)+"/promote", e.keyA, nil)
	e.must(st, b, &f)
	return f, b
}

type cfileList struct {
	Object  string          `json:"object"`
	Data    []ContainerFile `json:"data"`
	FirstID *string         `json:"first_id"`
	LastID  *string         `json:"last_id"`
	HasMore bool            `json:"has_more"`
}

// listAll pages through a container's files with the given page size.
func (e *env) listAll(prefix, ref string, limit int, extra string) []ContainerFile {
	e.t.Helper()
	var all []ContainerFile
	after := ""
	for pages := 0; ; pages++ {
		if pages > 50 {
			e.t.Fatal("paging does not end")
		}
		q := fmt.Sprintf("?limit=%d%s", limit, extra)
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		var l cfileList
		st, b := e.do("GET", prefix+"/containers/"+ref+"/files"+q, e.keyA, nil)
		e.must(st, b, &l)
		if l.Object != "list" || len(l.Data) > limit {
			e.t.Fatalf("page: %s", b)
		}
		all = append(all, l.Data...)
		if !l.HasMore {
			return all
		}
		after = *l.LastID
	}
}

func paths(fs []ContainerFile) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Path)
	}
	return out
}

func TestContainerFiles(t *testing.T) {
	e := newEnv(t, "crun", "busybox", func(c *Config) { c.MaxUploadBytes = 64 << 10 })
	c := e.create(e.keyA, "files")
	e.exec(e.keyA, c.ID, "mkdir -p out a/b && printf 'x,y\\n1,2\\n' > out/report.csv && echo deep > a/b/c.txt && printf n > \"$(printf 'new\\nline')\"")

	var up ContainerFile
	st, b := e.upload("/api/v1/containers/"+c.ID+"/files", e.keyA, part{name: "path", content: "in/"}, part{name: "file", filename: "data.csv", content: "a,b\n3,4\n"})
	e.must(st, b, &up)
	if up.Path != "in/data.csv" || up.Source != "user" || up.Bytes != 8 || up.Object != "container.file" || up.ContainerID != c.ID || up.ID != CFileID("in/data.csv") || up.CreatedAt == 0 {
		t.Fatalf("upload: %s", b)
	}

	t.Run("01 list in path order, paged, with cfile ids of the paths", func(t *testing.T) {
		want := []string{"a/b/c.txt", "in/data.csv", "new\nline", "out/report.csv"}
		for _, limit := range []int{1, 3, 100} {
			got := e.listAll("/api/v1", c.ID, limit, "")
			if !slices.Equal(paths(got), want) {
				t.Fatalf("limit %d: %q, want %q", limit, paths(got), want)
			}
			for _, f := range got {
				if rel, err := ParseCFileID(f.ID); err != nil || rel != f.Path {
					t.Errorf("id %s: %q %v", f.ID, rel, err)
				}
				if want := map[bool]string{true: "user", false: "assistant"}[f.Path == "in/data.csv"]; f.Source != want {
					t.Errorf("%s: source %s", f.Path, f.Source)
				}
			}
		}
		var l cfileList
		st, b := e.do("GET", "/api/v1/containers/files/files", e.keyA, nil) // by name
		e.must(st, b, &l)
		if len(l.Data) != 4 || *l.FirstID != CFileID("a/b/c.txt") || *l.LastID != CFileID("out/report.csv") || l.HasMore {
			t.Fatalf("default page: %s", b)
		}
	})

	t.Run("02 retrieve, download, and the command sees the upload", func(t *testing.T) {
		id := CFileID("out/report.csv")
		var f ContainerFile
		st, b := e.do("GET", "/api/v1/containers/"+c.ID+"/files/"+id, e.keyA, nil)
		e.must(st, b, &f)
		if f.Path != "out/report.csv" || f.Bytes != 8 || f.Source != "assistant" {
			t.Fatalf("get: %s", b)
		}
		st, b, h := e.getRaw("/api/v1/containers/"+c.ID+"/files/"+id+"/content", e.keyA)
		if st != 200 || string(b) != "x,y\n1,2\n" || h.Get("Content-Length") != "8" {
			t.Fatalf("content: %d %q %v", st, b, h)
		}
		if r := e.exec(e.keyA, c.ID, "cat in/data.csv"); r.Output[0].Stdout != "a,b\n3,4\n" {
			t.Fatalf("uploaded file in the sandbox: %q", r.Output[0].Stdout)
		}
	})

	t.Run("03 promote into the workspace's files", func(t *testing.T) {
		f, b := e.promote(c.ID, "out/report.csv")
		if f.Shape != "openrouter" || f.Type != "file" || f.Filename != "report.csv" || f.MimeType != "text/csv" || f.SizeBytes != 8 || f.Source != "container:"+c.ID || !f.Downloadable {
			t.Fatalf("promote: %s", b)
		}
		// The copy outlives the container.
		st, b = e.do("DELETE", "/api/v1/containers/"+c.ID, e.keyA, nil)
		e.must(st, b, nil)
		st, b, _ = e.getRaw("/api/v1/files/"+f.ID+"/content", e.keyA)
		if st != 200 || string(b) != "x,y\n1,2\n" {
			t.Fatalf("promoted content after the container's delete: %d %q", st, b)
		}
		c = e.create(e.keyA, "files")
	})

	t.Run("04 a sleeping container's files are served without waking it", func(t *testing.T) {
		e.exec(e.keyA, c.ID, "echo zz > z.txt")
		if err := e.mgr.Sleep(t.Context(), c.ID); err != nil {
			t.Fatal(err)
		}
		if got := paths(e.listAll("/api/v1", c.ID, 10, "")); !slices.Equal(got, []string{"z.txt"}) {
			t.Fatalf("list asleep: %q", got)
		}
		st, b, _ := e.getRaw("/api/v1/containers/"+c.ID+"/files/"+CFileID("z.txt")+"/content", e.keyA)
		if st != 200 || string(b) != "zz\n" {
			t.Fatalf("content asleep: %d %q", st, b)
		}
		st, b = e.upload("/api/v1/containers/"+c.ID+"/files", e.keyA, part{name: "file", filename: "up.txt", content: "u"})
		e.must(st, b, nil)
		st, b = e.do("DELETE", "/api/v1/containers/"+c.ID+"/files/"+CFileID("z.txt"), e.keyA, nil)
		e.must(st, b, nil)
		var co containerObject
		st, b = e.do("GET", "/api/v1/containers/"+c.ID, e.keyA, nil)
		e.must(st, b, &co)
		if co.Status != "sleeping" {
			t.Fatalf("file calls woke the container: %s", b)
		}
		if s, _ := e.mgr.Status(c.ID); s != sandbox.Sleeping {
			t.Fatalf("manager says %s", s)
		}
		if got := paths(e.listAll("/api/v1", c.ID, 10, "")); !slices.Equal(got, []string{"up.txt"}) {
			t.Fatalf("after upload and delete: %q", got)
		}
		if st, _ := e.do("GET", "/api/v1/containers/"+c.ID+"/files/"+CFileID("z.txt"), e.keyA, nil); st != 404 {
			t.Fatalf("deleted file: %d", st)
		}
	})

	t.Run("05 bad input is a clear 4xx and loses nothing", func(t *testing.T) {
		e.exec(e.keyA, c.ID, "echo keep > keep.txt")
		base := "/api/v1/containers/" + c.ID + "/files"
		for _, tc := range []struct {
			method, path string
			want         int
		}{
			{"GET", base + "?limit=0", 400},
			{"GET", base + "?limit=1001", 400},
			{"GET", base + "?limit=x", 400},
			{"GET", base + "?order=asc", 400},
			{"GET", base + "?bogus=1", 400},
			{"GET", base + "?after=nope", 400},
			{"GET", base + "?after=cfile_%21%21", 400},
			{"GET", base + "/notcfile", 400},
			{"GET", base + "/cfile_a2VlcC50eHQ=", 400},    // padded
			{"GET", base + "/cfile_a2VlcC50eHR", 400},     // bits left over
			{"GET", base + "/cfile_Li4veA", 400},          // "../x"
			{"GET", base + "/cfile_L2V0Yy9wYXNzd2Q", 400}, // "/etc/passwd"
			{"GET", base + "/cfile_YS8uL2I", 400},         // "a/./b"
			{"GET", base + "/cfile_" + strings.Repeat("A", 6000), 400},
			{"GET", base + "/" + CFileID("missing.txt"), 404},
			{"GET", base + "/" + CFileID("missing.txt") + "/content", 404},
			{"DELETE", base + "/" + CFileID("missing.txt"), 404},
			{"POST", base + "/" + CFileID("missing.txt") + "/promote", 404},
			{"GET", "/api/v1/containers/nope/files", 404},
			{"GET", "/api/v1/containers/bad%20id/files", 404},
		} {
			st, b := e.do(tc.method, tc.path, e.keyA, nil)
			if st != tc.want {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, st, b, tc.want)
				continue
			}
			envelope(t, st, b)
		}
		for _, tc := range []struct {
			what  string
			parts []part
			ct    string
			body  string
			want  int
		}{
			{what: "no file part", parts: []part{{name: "path", content: "x"}}, want: 400},
			{what: "unknown field", parts: []part{{name: "colour", content: "x"}}, want: 400},
			{what: "path leaves the home", parts: []part{{name: "path", content: "../../etc/x"}, {name: "file", filename: "a", content: "x"}}, want: 400},
			{what: "absolute path elsewhere", parts: []part{{name: "path", content: "/etc/passwd"}, {name: "file", filename: "a", content: "x"}}, want: 400},
			{what: "over the upload cap", parts: []part{{name: "path", content: "keep.txt"}, {name: "file", filename: "a", content: strings.Repeat("x", 65<<10)}}, want: 413},
			{what: "not multipart", ct: "text/plain", body: "hello", want: 400},
			{what: "bad JSON", ct: "application/json", body: "{", want: 400},
			{what: "JSON without file_id", ct: "application/json", body: "{}", want: 400},
			{what: "JSON file_id of nothing", ct: "application/json", body: `{"file_id":"file_00000000000000000000000000000000"}`, want: 404},
			{what: "truncated multipart", ct: "multipart/form-data; boundary=XX", body: "--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"keep.txt\"\r\n\r\nnew", want: 400},
			{what: "multipart without boundary", ct: "multipart/form-data", body: "x", want: 400},
		} {
			var st int
			var b []byte
			if tc.parts != nil {
				st, b = e.upload(base, e.keyA, tc.parts...)
			} else {
				st, b = e.doH("POST", base, tc.body, map[string]string{"Authorization": "Bearer " + e.keyA, "Content-Type": tc.ct})
			}
			if st != tc.want {
				t.Errorf("%s: %d %s, want %d", tc.what, st, b, tc.want)
				continue
			}
			envelope(t, st, b)
		}
		if r := e.exec(e.keyA, c.ID, "cat keep.txt; ls -a | grep -c shellgate-upload; ls /etc/x 2>&1 | grep -c 'No such'"); r.Output[0].Stdout != "keep\n0\n1\n" {
			t.Fatalf("after refused uploads: %q", r.Output[0].Stdout)
		}
	})

	t.Run("06 another workspace's container and files answer like missing ones", func(t *testing.T) {
		f, _ := e.promote(c.ID, "keep.txt")
		id := CFileID("keep.txt")
		for _, tc := range []struct{ method, path, missing string }{
			{"GET", "/api/v1/containers/%s/files", "/api/v1/containers/cntr_00000000000000000000000000000000/files"},
			{"GET", "/api/v1/containers/%s/files/" + id, "/api/v1/containers/cntr_00000000000000000000000000000000/files/" + id},
			{"GET", "/api/v1/containers/%s/files/" + id + "/content", "/api/v1/containers/cntr_00000000000000000000000000000000/files/" + id + "/content"},
			{"DELETE", "/api/v1/containers/%s/files/" + id, "/api/v1/containers/cntr_00000000000000000000000000000000/files/" + id},
			{"POST", "/api/v1/containers/%s/files/" + id + "/promote", "/api/v1/containers/cntr_00000000000000000000000000000000/files/" + id + "/promote"},
			{"GET", "/v1/containers/%s/files", "/v1/containers/cntr_00000000000000000000000000000000/files"},
			{"GET", "/v1/containers/%s/files/" + id + "/content", "/v1/containers/cntr_00000000000000000000000000000000/files/" + id + "/content"},
			{"DELETE", "/v1/containers/%s/files/" + id, "/v1/containers/cntr_00000000000000000000000000000000/files/" + id},
		} {
			p := fmt.Sprintf(tc.path, c.ID)
			st, b := e.do(tc.method, p, e.keyB, nil)
			mst, mb := e.do(tc.method, tc.missing, e.keyB, nil)
			missing := strings.ReplaceAll(string(mb), "cntr_00000000000000000000000000000000", c.ID)
			if st != 404 || mst != 404 || string(b) != missing {
				t.Errorf("%s %s with another workspace's key: %d %s; missing: %d %s", tc.method, p, st, b, mst, mb)
			}
		}
		st, b = e.upload("/api/v1/containers/"+c.ID+"/files", e.keyB, part{name: "file", filename: "x", content: "x"})
		if st != 404 {
			t.Errorf("upload into another workspace's container: %d %s", st, b)
		}
		for _, p := range []string{"/api/v1/files/%s", "/api/v1/files/%s/content", "/v1/files/%s", "/v1/files/%s/content"} {
			st, b := e.do("GET", fmt.Sprintf(p, f.ID), e.keyB, nil)
			mst, mb := e.do("GET", fmt.Sprintf(p, "file_00000000000000000000000000000000"), e.keyB, nil)
			missing := strings.ReplaceAll(string(mb), "file_00000000000000000000000000000000", f.ID)
			if st != 404 || mst != 404 || string(b) != missing {
				t.Errorf("%s with another workspace's key: %d %s; missing: %d %s", p, st, b, mst, mb)
			}
		}
		st, b = e.doH("POST", "/v1/containers/"+c.ID+"/files", `{"file_id":"`+f.ID+`"}`, map[string]string{"Authorization": "Bearer " + e.keyB, "Content-Type": "application/json"})
		if st != 404 {
			t.Errorf("copy into another workspace's container: %d %s", st, b)
		}
		other := e.create(e.keyB, "theirs")
		st, b = e.doH("POST", "/v1/containers/"+other.ID+"/files", `{"file_id":"`+f.ID+`"}`, map[string]string{"Authorization": "Bearer " + e.keyB, "Content-Type": "application/json"})
		if _, typ, _, _ := openAIError(t, st, b); st != 404 || typ != "invalid_request_error" {
			t.Errorf("copy another workspace's file: %d %s", st, b)
		}
		if st, b := e.do("DELETE", "/api/v1/files/"+f.ID, e.keyB, nil); st != 404 {
			t.Errorf("delete another workspace's file: %d %s", st, b)
		}
		if st, _, _ := e.getRaw("/api/v1/files/"+f.ID+"/content", e.keyA); st != 200 {
			t.Errorf("the file is gone after another workspace's attempts: %d", st)
		}
	})
}

// TestOpenRouterFileShapes: /api/v1/files answers in the shapes
// @openrouter/sdk picks by _shape: the list carries _shape and cursor (the
// next page's, null on the last), the delete {_shape, id,
// type:"file_deleted"}, and the content is application/octet-stream, the
// only type its download takes; /v1's OpenAI shapes are unchanged.
func TestOpenRouterFileShapes(t *testing.T) {
	e := newEnv(t, "crun", "busybox")
	var ids []string
	for _, name := range []string{"a.txt", "b.txt"} {
		var f orFile
		st, b := e.upload("/api/v1/files", e.keyA, part{name: "file", filename: name, content: "hello"})
		e.must(st, b, &f)
		ids = append(ids, f.ID)
	}
	var page map[string]any
	st, b := e.do("GET", "/api/v1/files?limit=1", e.keyA, nil)
	e.must(st, b, &page)
	if page["_shape"] != "openrouter" || page["has_more"] != true || page["cursor"] != ids[1] || page["last_id"] != ids[1] {
		t.Fatalf("first page: %s", b)
	}
	st, b = e.do("GET", "/api/v1/files?limit=1&cursor="+ids[1], e.keyA, nil)
	page = nil // Unmarshal would merge into the last page's keys
	e.must(st, b, &page)
	if c, ok := page["cursor"]; !ok || c != nil || page["has_more"] != false || page["first_id"] != ids[0] {
		t.Fatalf("page after the cursor: %s", b)
	}
	st, b = e.do("GET", "/v1/files", e.keyA, nil)
	page = nil
	e.must(st, b, &page)
	if _, ok := page["_shape"]; ok || page["object"] != "list" {
		t.Fatalf("/v1/files: %s", b)
	}
	st, b, h := e.getRaw("/api/v1/files/"+ids[0]+"/content", e.keyA)
	if st != 200 || string(b) != "hello" || h.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("content: %d %q %v", st, b, h)
	}
	if _, _, h := e.getRaw("/v1/files/"+ids[0]+"/content", e.keyA); h.Get("Content-Type") != "text/plain" {
		t.Fatalf("/v1 content type: %v", h)
	}
	var del map[string]any
	st, b = e.do("DELETE", "/api/v1/files/"+ids[0], e.keyA, nil)
	e.must(st, b, &del)
	if del["_shape"] != "openrouter" || del["id"] != ids[0] || del["type"] != "file_deleted" {
		t.Fatalf("delete: %s", b)
	}
	st, b = e.do("DELETE", "/v1/files/"+ids[1], e.keyA, nil)
	del = nil
	e.must(st, b, &del)
	if _, ok := del["_shape"]; ok || del["deleted"] != true || del["object"] != "file" {
		t.Fatalf("/v1 delete: %s", b)
	}
}
