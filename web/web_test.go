package web

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

func get(t *testing.T, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	Console().ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

// TestConsoleFiles: every file is served with the strict Content-Security-Policy
// and its own type; no directory listings, no other methods.
func TestConsoleFiles(t *testing.T) {
	n := 0
	err := fs.WalkDir(files, "console", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		rec := get(t, "GET", "/"+p)
		if rec.Code != 200 {
			t.Errorf("%s: %d", p, rec.Code)
		}
		h := rec.Header()
		if h.Get("Content-Security-Policy") != CSP || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: security headers missing: %v", p, h)
		}
		want := map[string]string{".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}
		for ext, ct := range want {
			if strings.HasSuffix(p, ext) && !strings.HasPrefix(h.Get("Content-Type"), ct) {
				t.Errorf("%s: Content-Type %q, want %s", p, h.Get("Content-Type"), ct)
			}
		}
		return nil
	})
	if err != nil || n < 8 {
		t.Fatalf("walked %d files: %v", n, err)
	}
	if rec := get(t, "GET", "/console/"); rec.Code != 200 || !strings.Contains(rec.Body.String(), `<script type="module" src="app.js">`) {
		t.Fatalf("/console/: %d %s", rec.Code, rec.Body)
	}
	for _, p := range []string{"/console/vendor/", "/console/vendor", "/console/nope.js", "/console/../web.go", "/console/%2e%2e/web.go"} {
		if rec := get(t, "GET", p); rec.Code != 404 {
			t.Errorf("GET %s: %d, want 404", p, rec.Code)
		}
	}
	if rec := get(t, "POST", "/console/"); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /console/: %d", rec.Code)
	}
}

// TestCSPStrict: the policy allows nothing inline, nothing from elsewhere, no eval.
func TestCSPStrict(t *testing.T) {
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
		"frame-ancestors 'none'", "base-uri 'none'", "require-trusted-types-for 'script'"} {
		if !strings.Contains(CSP, want+";") && !strings.HasSuffix(CSP, want) {
			t.Errorf("CSP lacks %s", want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*"} {
		if strings.Contains(CSP, bad) {
			t.Errorf("CSP allows %s", bad)
		}
	}
}

// TestNoInlineCode: the page has no inline script, style or event handler (the CSP
// would refuse them), and the scripts write no HTML strings into the page.
func TestNoInlineCode(t *testing.T) {
	page, _ := fs.ReadFile(files, "console/index.html")
	z := html.NewTokenizer(strings.NewReader(string(page)))
	inScript := false
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			break
		}
		tok := z.Token()
		switch tt {
		case html.StartTagToken, html.SelfClosingTagToken:
			src := false
			for _, a := range tok.Attr {
				if a.Key == "style" || strings.HasPrefix(a.Key, "on") {
					t.Errorf("index.html: <%s %s=…> is inline code", tok.Data, a.Key)
				}
				if a.Key == "src" {
					src = true
				}
				if (a.Key == "href" || a.Key == "src") && regexp.MustCompile(`^(https?:)?//|^javascript:`).MatchString(a.Val) {
					t.Errorf("index.html: <%s %s=%q> loads from elsewhere", tok.Data, a.Key, a.Val)
				}
			}
			if tok.Data == "style" {
				t.Error("index.html has a <style> element")
			}
			if tok.Data == "script" && !src {
				t.Error("index.html has an inline <script>")
			}
			inScript = tok.Data == "script"
		case html.TextToken:
			if inScript && strings.TrimSpace(tok.Data) != "" {
				t.Error("index.html has script text inline")
			}
		case html.EndTagToken:
			inScript = false
		}
	}
	sinks := regexp.MustCompile(`\.(innerHTML|outerHTML|insertAdjacentHTML)\b|document\.write|\beval\(|new Function\(|https?://[a-z]`)
	fs.WalkDir(files, "console", func(p string, d fs.DirEntry, err error) error {
		if d.IsDir() || !strings.HasSuffix(p, ".js") {
			return nil
		}
		src, _ := fs.ReadFile(files, p)
		for _, line := range strings.Split(string(src), "\n") {
			// auth.js names the scope a token grant asks for: a string, not a fetch.
			if m := sinks.FindString(line); m != "" && !strings.Contains(line, "SCOPE =") && !strings.HasPrefix(p, "console/vendor/") {
				t.Errorf("%s: %q in %s", p, m, strings.TrimSpace(line))
			}
		}
		return nil
	})
}
