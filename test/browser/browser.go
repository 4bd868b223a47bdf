// Package browser runs Debian's chromium headless for tests, driven through the
// DevTools protocol (chromedp), with the flags that keep it quiet on a closed
// network: no background networking, component updates, sync or QUIC, and a fresh
// profile per browser.
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// Path is Debian's chromium, or "" if it is not installed (scripts/setup.sh --test
// installs it).
func Path() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// New starts a headless chromium with a window of w×h CSS pixels and returns the
// context of its first tab; it is closed when the test ends. Without chromium the
// test is skipped.
func New(t *testing.T, w, h int) context.Context {
	t.Helper()
	bin := Path()
	if bin == "" {
		t.Skip("no chromium here: run scripts/setup.sh --test")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(w, h),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), // tests run as root
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,InterestFeedContentSuggestions"),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("lang", "en-GB"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(func(f string, a ...any) { t.Logf("chromedp: "+f, a...) }))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Run(ctx, emulation.SetDeviceMetricsOverride(int64(w), int64(h), 1, false)); err != nil {
		t.Fatalf("start chromium (%s): %v", bin, err)
	}
	return ctx
}

// Resize sets the viewport to w×h CSS pixels.
func Resize(w, h int) chromedp.Action {
	return emulation.SetDeviceMetricsOverride(int64(w), int64(h), 1, false)
}

// Shots writes screenshots to a folder for review.
type Shots struct {
	Dir string
	n   int
}

// NewShots makes the folder dir (emptied first) and says where it is in the test log.
func NewShots(t *testing.T, dir string) *Shots {
	t.Helper()
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots: %s", dir)
	return &Shots{Dir: dir}
}

// Take saves the viewport (full page when full) as NN-name.png and returns its path.
func (s *Shots) Take(ctx context.Context, t *testing.T, name string, full bool) string {
	t.Helper()
	var buf []byte
	var act chromedp.Action = chromedp.CaptureScreenshot(&buf)
	if full {
		act = chromedp.FullScreenshot(&buf, 100)
	}
	if err := chromedp.Run(ctx, act); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	s.n++
	path := filepath.Join(s.Dir, fmt.Sprintf("%02d-%s.png", s.n, strings.ReplaceAll(name, " ", "-")))
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Text is the innerText of the first element matching the CSS selector sel, ""
// if there is none.
func Text(ctx context.Context, sel string) (string, error) {
	var got string
	err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, sel), &got))
	return got, err
}

// WaitText waits until the text of the element sel contains want, up to d.
func WaitText(ctx context.Context, sel, want string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		got, err := Text(ctx, sel)
		if err == nil && strings.Contains(got, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: text %q does not contain %q after %s (%v)", sel, got, want, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
