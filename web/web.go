// Package web holds Basin's web console (docs/console.md): plain ES modules, CSS and
// a vendored uPlot (web/console/vendor/uplot), embedded in the binary and served by
// `basin serve` at /console/. Nothing is built: the files here are what browsers get.
//
// The console talks to Basin only through the public REST API, with the signed-in
// caller's own credentials; this package only serves its files, with a strict
// Content-Security-Policy (no inline scripts or styles, nothing from elsewhere).
package web

import (
	"bytes"
	"embed"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed console
var files embed.FS

// CSP is the Content-Security-Policy of every console file: scripts, styles, images
// and API calls from Basin itself only; no inline script or style, no eval, no
// frames, no plugins; DOM sinks like innerHTML refuse strings (Trusted Types).
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// Console serves the console's files below /console/: /console/ is the page, every
// other path a file of web/console (no directory listings). Only GET and HEAD.
func Console() http.Handler {
	sub, err := fs.Sub(files, "console")
	if err != nil {
		panic(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), clipboard-write=(self)")
		// Small files, fetched again when they change (an upgrade): no stale console.
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/console/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		if name == "" {
			name = "index.html"
		}
		data, err := fs.ReadFile(sub, name)
		if err != nil || !fs.ValidPath(name) {
			http.NotFound(w, r)
			return
		}
		ctype := mime.TypeByExtension(path.Ext(name))
		if strings.HasSuffix(name, ".js") {
			ctype = "text/javascript; charset=utf-8"
		}
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		h.Set("Content-Type", ctype)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
	})
}
