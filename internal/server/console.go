package server

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/shellgate/shellgate/internal/guard"
)

// The web console (GET /console/): a small front end embedded in the
// binary (plain HTML, JavaScript and CSS; no build step, nothing fetched
// from elsewhere). The pages themselves are public and hold no data: the
// browser keeps the API key the user types in sessionStorage and sends it
// as `Authorization: Bearer` to the JSON API routes, which check it as for
// any client. Everything a page shows comes from those routes and is
// hostile (file names, command output, prompts): the script only ever puts
// it in the page as text (textContent), and the Content-Security-Policy
// below makes that a rule the browser enforces (Trusted Types: no string
// reaches innerHTML or another HTML sink; scripts, styles and fetches only
// from this origin; no inline script or style; no framing).
//
// The console's routes are not API routes: they are not in openapi.json
// nor in Routes(), answer plain text errors, and take no key.

//go:embed console
var consoleFiles embed.FS

// consoleCSP is the Content-Security-Policy of every /console response.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'none'; base-uri 'none'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// consoleTypes are the content types of the console's files, by extension
// (not from the host's mime tables, which vary).
var consoleTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
}

// consoleMeta is /console/meta.json: what the guardrail form offers, from
// the detector itself.
func consoleMeta() []byte {
	b, _ := json.Marshal(map[string]any{
		"actions":    []string{guard.ActionFlag, guard.ActionRedact, guard.ActionBlock},
		"techniques": guard.Techniques(),
		"detector":   guard.Version,
	})
	return b
}

func (s *Server) consoleRoutes() {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	files := map[string][]byte{"meta.json": consoleMeta()}
	fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files[p], _ = fs.ReadFile(sub, p)
		}
		return nil
	})
	s.mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		consoleHeaders(w)
		http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
	})
	s.mux.HandleFunc("GET /console/{file...}", func(w http.ResponseWriter, r *http.Request) {
		consoleHeaders(w)
		name := r.PathValue("file")
		if name == "" {
			name = "index.html"
		}
		b, ok := files[name]
		ctype := consoleTypes[path.Ext(name)]
		if !ok || ctype == "" || strings.Contains(name, "/") {
			http.Error(w, "no such console page", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", ctype)
		w.Write(b)
	})
}

// consoleHeaders sets the security headers of every console response.
func consoleHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache")
}
