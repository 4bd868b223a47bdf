package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/basin-nas/basin/internal/client"
	"github.com/basin-nas/basin/test/browser"
)

// tab is one browser tab on the console, recording what a person would notice
// went wrong: script errors, Content-Security-Policy violations, and API answers
// of 403 (a button the caller may not use).
type tab struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots *browser.Shots
	mu    sync.Mutex
	// problems are script exceptions and CSP violations reported by the page.
	problems []string
	// denied are the API requests answered 403.
	denied []string
}

// watchCSP is run in every page before its own scripts: it collects the page's
// Content-Security-Policy violations where the test can read them.
const watchCSP = `window.__csp = []; document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI));`

func openTab(t *testing.T, base string, shots *browser.Shots, w, h int) *tab {
	tb := &tab{t: t, ctx: browser.New(t, w, h), base: base, shots: shots}
	chromedp.ListenTarget(tb.ctx, func(ev any) {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			tb.problems = append(tb.problems, "exception: "+msg)
		case *network.EventResponseReceived:
			if e.Response.Status == 403 && strings.Contains(e.Response.URL, "/v1/") {
				tb.denied = append(tb.denied, e.Response.URL)
			}
		}
	})
	tb.run(network.Enable(), chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(watchCSP).Do(ctx)
		return err
	}))
	return tb
}

// run runs actions, failing the test (with the page's text) if one fails.
func (tb *tab) run(actions ...chromedp.Action) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		body, _ := browser.Text(tb.ctx, "main")
		tb.t.Fatalf("browser: %v\npage:\n%s", err, body)
	}
}

func (tb *tab) text(sel string) string {
	tb.t.Helper()
	s, err := browser.Text(tb.ctx, sel)
	if err != nil {
		tb.t.Fatal(err)
	}
	return s
}

func (tb *tab) waitText(sel, want string, d time.Duration) {
	tb.t.Helper()
	if err := browser.WaitText(tb.ctx, sel, want, d); err != nil {
		body, _ := browser.Text(tb.ctx, "main")
		tb.t.Fatalf("%v\npage:\n%s", err, body)
	}
}

// page opens the console at #/route and waits for its heading.
func (tb *tab) page(route, heading string) {
	tb.t.Helper()
	tb.run(chromedp.Navigate(tb.base + "/console/#/" + route))
	tb.waitText("main h1", heading, 20*time.Second)
	tb.waitGone(`main .page[aria-busy]`)
	tb.checkLabels()
}

func (tb *tab) eval(js string, out any) {
	tb.t.Helper()
	tb.run(chromedp.Evaluate(js, out))
}

func (tb *tab) waitGone(sel string) {
	tb.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		tb.eval(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel), &n)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.t.Fatalf("%s still there after 30 s", sel)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (tb *tab) fill(name, value string) {
	tb.t.Helper()
	tb.run(chromedp.SetValue(fmt.Sprintf(`[name=%q]`, name), value, chromedp.ByQuery))
}

// click clicks the element an XPath finds (buttons and links by their text).
func (tb *tab) click(xpath string) {
	tb.t.Helper()
	tb.run(chromedp.Click(xpath, chromedp.BySearch))
}

// confirm answers the console's confirmation dialog with its yes button.
func (tb *tab) confirm() {
	tb.t.Helper()
	tb.run(chromedp.WaitVisible(`dialog[open] button[value="yes"]`, chromedp.ByQuery), chromedp.Click(`dialog[open] button[value="yes"]`, chromedp.ByQuery))
}

func (tb *tab) count(sel string) int {
	tb.t.Helper()
	var n int
	tb.eval(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel), &n)
	return n
}

// checkLabels: every visible form control has a label (or an aria-label), so a
// screen reader names it.
func (tb *tab) checkLabels() {
	tb.t.Helper()
	var unlabelled []string
	tb.eval(`[...document.querySelectorAll("input:not([type=hidden]), select, textarea")]
		.filter((e) => e.offsetParent !== null && !(e.labels && e.labels.length) && !e.getAttribute("aria-label"))
		.map((e) => e.outerHTML)`, &unlabelled)
	if len(unlabelled) > 0 {
		tb.t.Errorf("form controls without a label: %v", unlabelled)
	}
}

func (tb *tab) shot(name string) string {
	tb.t.Helper()
	return tb.shots.Take(tb.ctx, tb.t, name, true)
}

// finish fails the test on script errors or CSP violations the page reported.
func (tb *tab) finish() {
	tb.t.Helper()
	var csp []string
	tb.eval(`window.__csp || []`, &csp)
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if p := append(tb.problems, csp...); len(p) > 0 {
		tb.t.Errorf("the console reported problems: %q", p)
	}
}

// shotsDir is where the screenshots go: the test's artifacts directory with
// go test -artifacts, else BASIN_CONSOLE_SHOTS, else a folder in /tmp.
func shotsDir(t *testing.T) string {
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		return t.ArtifactDir()
	}
	if d := os.Getenv("BASIN_CONSOLE_SHOTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "basin-console-screenshots")
}

// consoleLink runs `basin console` as the owner and returns the link it prints.
func consoleLink(t *testing.T, s *server, keyFile string) string {
	t.Helper()
	out, err := exec.Command(basinBin, "console", "--endpoint", "http://"+s.addr, "--key-file", keyFile,
		"--project", "p1", "--location", "us-east4").CombinedOutput()
	if err != nil {
		t.Fatalf("basin console: %v\n%s", err, out)
	}
	link := regexp.MustCompile(`http://\S+`).FindString(string(out))
	if !strings.Contains(link, "/console/#signin=") {
		t.Fatalf("basin console printed no sign-in link:\n%s", out)
	}
	return link
}

// TestConsole drives the web console in headless Chromium against a real basin
// serve: the owner signs in with a `basin console` link, creates a pool and a
// volume, reads its mount command, takes and reverts a snapshot, watches its live
// charts under a basin bench load, and deletes it; a bad input shows the API's
// message next to its field; a viewer signed in with a key file sees read-only
// pages and never meets a 403. Screenshots of every page go to shotsDir.
func TestConsole(t *testing.T) {
	s := newServer(t)
	s.start()
	c := s.client()
	base := "http://" + s.addr
	shots := browser.NewShots(t, shotsDir(t))
	owner := openTab(t, base, shots, 1280, 800)

	// Sign in with a one-time link: the code leaves the address bar at once.
	link := consoleLink(t, s, filepath.Join(s.dataDir, "owner-key.json"))
	owner.run(chromedp.Navigate(link))
	owner.waitText("main h1", "Volumes", 20*time.Second)
	var href string
	owner.run(chromedp.Location(&href))
	if strings.Contains(href, "signin") {
		t.Errorf("the sign-in code is still in the address bar: %s", href)
	}
	owner.waitText("#who", "basin-owner@", 5*time.Second)

	// A pool.
	owner.page("pools", "Storage pools")
	owner.click(`//a[normalize-space()="Create pool"]`)
	owner.waitText("main h1", "Create a storage pool", 10*time.Second)
	owner.checkLabels()
	owner.shot("pool-create")
	owner.fill("storagePoolId", "pool1")
	owner.fill("capacityGib", "100")
	owner.click(`//button[normalize-space()="Create pool"]`)
	owner.waitText("main h1", "Storage pools", 30*time.Second)
	owner.waitText("main", "pool1", 30*time.Second)
	owner.waitText("main", "PREMIUM", 5*time.Second)
	owner.shot("pools")

	// A bad input: the API's message, next to the field it names.
	owner.page("volumes", "Volumes")
	// Keyboard: Tab to "Create volume", Enter follows it.
	for i := 0; i < 30; i++ {
		var focused string
		owner.eval(`document.activeElement ? document.activeElement.textContent.trim() : ""`, &focused)
		if focused == "Create volume" {
			break
		}
		owner.run(chromedp.KeyEvent(kb.Tab))
	}
	owner.run(chromedp.KeyEvent(kb.Enter))
	owner.waitText("main h1", "Create a volume", 10*time.Second)
	owner.waitGone(`main .page[aria-busy]`)
	owner.checkLabels()
	owner.fill("volumeId", "Bad_ID")
	owner.fill("capacityGib", "1")
	owner.click(`//button[normalize-space()="Create volume"]`)
	owner.waitText(".field-error", "is not a valid ID", 20*time.Second)
	var errNextTo struct {
		Text    string `json:"text"`
		Invalid string `json:"invalid"`
		Focused bool   `json:"focused"`
	}
	owner.eval(`(() => { const i = document.querySelector("input[name=volumeId]");
		return {text: i.closest(".field").querySelector(".field-error")?.innerText || "", invalid: i.getAttribute("aria-invalid"),
			focused: document.activeElement === i}; })()`, &errNextTo)
	if !strings.Contains(errNextTo.Text, `"Bad_ID" is not a valid ID`) || errNextTo.Invalid != "true" || !errNextTo.Focused {
		t.Errorf("the API's error is not shown at the volume ID field (focused, aria-invalid): %+v", errNextTo)
	}
	owner.shot("volume-create-bad-input")

	// More than the pool has free: said under Capacity with the pool's free
	// space as the user types, and again at submit (focused there, nothing at
	// the top of the form, no request made).
	owner.waitText("input[name=capacityGib] ~ .hint", "Pool pool1 has 100 GiB free.", 5*time.Second)
	owner.fill("capacityGib", "500")
	typed := `document.querySelector("input[name=capacityGib]").dispatchEvent(new Event("input", {bubbles: true}))`
	owner.eval(typed, nil)
	var capErr struct {
		Text    string `json:"text"`
		Invalid string `json:"invalid"`
		Focused bool   `json:"focused"`
		Top     int    `json:"top"`
	}
	capProbe := `(() => { const i = document.querySelector("input[name=capacityGib]");
		return {text: i.closest(".field").querySelector(".field-error")?.innerText || "", invalid: i.getAttribute("aria-invalid") || "",
			focused: document.activeElement === i, top: document.querySelectorAll("main .form-error").length}; })()`
	owner.eval(capProbe, &capErr)
	const capWant = "Storage pool pool1 has 100 GiB free; this volume asks for 500 GiB."
	if capErr.Text != capWant || capErr.Invalid != "true" || capErr.Top != 0 {
		t.Errorf("typing 500 GiB into a pool with 100 free: %+v, want %q under Capacity", capErr, capWant)
	}
	owner.click(`//button[normalize-space()="Create volume"]`)
	owner.waitGone(`main form button:disabled`)
	owner.eval(capProbe, &capErr)
	if capErr.Text != capWant || capErr.Invalid != "true" || !capErr.Focused || capErr.Top != 0 {
		t.Errorf("submitting 500 GiB into a pool with 100 free: %+v, want %q under Capacity, focused", capErr, capWant)
	}
	owner.shot("volume-create-over-capacity")
	owner.fill("capacityGib", "1")
	owner.eval(typed, nil)
	owner.eval(capProbe, &capErr)
	if capErr.Text != "" || capErr.Invalid != "" {
		t.Errorf("the capacity error stays after 1 GiB was typed: %+v", capErr)
	}

	// The volume, then its page and mount commands.
	owner.fill("volumeId", "vol1")
	owner.fill("exportPolicy.rules[0].allowedClients", s.subnet.String())
	// basin bench runs as root on the client: keep root's rights.
	owner.run(chromedp.Click(`[name="exportPolicy.rules[0].hasRootAccess"]`, chromedp.ByQuery))
	owner.click(`//button[normalize-space()="Create volume"]`)
	owner.waitText("main h1", "Volume vol1", 60*time.Second)
	ep := endpoint(t, c, "vol1")
	owner.waitText("#mount-nfsv3-linux", fmt.Sprintf("sudo mount -t nfs -o rw,hard,vers=3,proto=tcp,rsize=1048576,wsize=1048576,nconnect=4 %s:/vol1 /mnt/vol1", ep), 10*time.Second)
	owner.waitText("#mount-nfsv3-windows", fmt.Sprintf(`mount -o anon,nolock,mtype=hard \\%s\vol1 Z:`, ep), 5*time.Second)
	owner.checkLabels()
	// One pool: no empty "Move to pool" list, a sentence instead.
	owner.waitText("#move-none", "pool1 is the only pool in this location", 5*time.Second)
	if n := owner.count(`main select[name=storagePool]`); n != 0 {
		t.Errorf("the volume page offers %d pool lists to move to with one pool", n)
	}

	// Snapshots: take two, revert to the first (which deletes the newer one).
	for _, snap := range []string{"s1", "s2"} {
		owner.fill("snapshotId", snap)
		owner.click(`//button[normalize-space()="Take snapshot"]`)
		owner.waitText("#snap-title + * table, section[aria-labelledby=snap-title] table", snap, 30*time.Second)
		owner.waitGone(`main .page[aria-busy]`)
		// Done is said in the page's status line, not in a toast over the page.
		owner.waitText("#op-status", "Snapshot "+snap+": done.", 5*time.Second)
		if n := owner.count(".toast"); n != 0 {
			t.Errorf("%d toasts over the page after snapshot %s", n, snap)
		}
	}
	owner.shot("volume-snapshots")
	owner.click(`//tr[th[normalize-space()="s1"]]//button[normalize-space()="Revert"]`)
	owner.confirm()
	deadline := time.Now().Add(60 * time.Second)
	for owner.count(`section[aria-labelledby=snap-title] table`) == 0 || strings.Contains(owner.text(`section[aria-labelledby=snap-title] table`), "s2") ||
		!strings.Contains(owner.text(`section[aria-labelledby=snap-title] table`), "s1") {
		if time.Now().After(deadline) {
			t.Fatalf("after the revert to s1 the page lists: %s", owner.text(`section[aria-labelledby=snap-title]`))
		}
		time.Sleep(200 * time.Millisecond)
	}
	var snaps struct {
		Snapshots []client.Object `json:"snapshots"`
	}
	if err := c.Do(context.Background(), "GET", loc+"/volumes/vol1/snapshots", nil, nil, &snaps); err != nil || len(snaps.Snapshots) != 1 {
		t.Fatalf("snapshots after the revert: %v, %v", snaps.Snapshots, err)
	}
	var ops struct {
		Operations []client.Object `json:"operations"`
	}
	c.Do(context.Background(), "GET", loc+"/operations", nil, nil, &ops)
	reverted := false
	for _, op := range ops.Operations {
		md, _ := op["metadata"].(map[string]any)
		if md["verb"] == "revert" && op["done"] == true && op["error"] == nil {
			reverted = true
		}
	}
	if !reverted {
		t.Errorf("no successful revert operation: %v", ops.Operations)
	}

	// Live charts during a basin bench load from a client host.
	h := s.host(207)
	benchCtx, stopBench := context.WithTimeout(context.Background(), 150*time.Second)
	defer stopBench()
	benchDone := make(chan error, 1)
	go func() {
		out, err := h.Command(benchCtx, basinBin, "bench", "--engine", "nfs", "--url", fmt.Sprintf("nfs://%s/vol1", ep),
			"--name", "r", "--rw", "randrw", "--rwmixread", "70", "--bs", "16k", "--iodepth", "8", "--size", "64m", "--runtime", "90s", "--time_based").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, out)
		}
		benchDone <- err
	}()
	owner.page("volumes/vol1", "Volume vol1")
	// Space used: the API's usedGib rounds up, so "≤ 1 GiB" (anything up to
	// 1 GiB) is drawn as not known, an empty bar, never as a full 1 GiB one.
	var bar struct {
		Value   float64 `json:"value"`
		Unknown bool    `json:"unknown"`
		Text    string  `json:"text"`
	}
	readBar := func() {
		owner.eval(`(() => { const m = document.querySelector("section[aria-label=Details] meter");
			return { value: m.value, unknown: m.classList.contains("unknown"), text: m.parentElement.querySelector("span").textContent }; })()`, &bar)
	}
	if readBar(); bar.Text == "≤ 1 GiB of 1 GiB" && (bar.Value != 0 || !bar.Unknown) {
		t.Errorf("vol1's space before Basin measured it: %+v, want an empty bar marked unknown", bar)
	}
	readNow := regexp.MustCompile(`Read [1-9][0-9,.]* requests/s`)
	// Six 10-second samples of the load drawn, the latest showing reads.
	deadline = time.Now().Add(100 * time.Second)
	drawn := func() bool {
		var n int
		owner.eval(`Number(document.querySelector("#chart-iops").dataset.points || 0)`, &n)
		return n >= 6
	}
	for !readNow.MatchString(owner.text("#chart-iops .chart-now")) || !drawn() {
		select {
		case err := <-benchDone:
			t.Fatalf("basin bench ended before the charts showed its load: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			var m client.Object
			c.Do(context.Background(), "GET", loc+"/volumes/vol1/metrics?metric=readIops,writeIops", nil, nil, &m)
			stopBench()
			t.Fatalf("the IOPS chart shows no reads under load: %q\nthe API: %v\nbench: %v", owner.text("#chart-iops"), m, <-benchDone)
		}
		time.Sleep(time.Second)
	}
	var canvases int
	owner.eval(`document.querySelectorAll("#chart-iops canvas").length`, &canvases)
	if canvases == 0 {
		t.Errorf("the IOPS chart drew no canvas")
	}
	t.Logf("charts under load: %s | %s | %s", owner.text("#chart-iops .chart-now"), owner.text("#chart-mibps .chart-now"), owner.text("#chart-latency .chart-now"))
	// The throughput chart draws the total of read and write, the figure the
	// ceiling applies to, and says so.
	var legend []string
	owner.eval(`[...document.querySelectorAll("#chart-mibps .u-legend .u-label")].map((l) => l.textContent)`, &legend)
	if strings.Join(legend, ",") != "Read,Write,Total,Ceiling" {
		t.Errorf("the throughput chart's series: %q, want Read, Write, Total, Ceiling", legend)
	}
	mibNow := regexp.MustCompile(`Read ([0-9.,]+) MiB/s · Write ([0-9.,]+) MiB/s · Total ([0-9.,]+) MiB/s`).FindStringSubmatch(owner.text("#chart-mibps .chart-now"))
	if mibNow == nil {
		t.Errorf("the throughput chart's latest values have no total: %q", owner.text("#chart-mibps .chart-now"))
	} else {
		num := func(s string) float64 {
			var f float64
			fmt.Sscan(strings.ReplaceAll(s, ",", ""), &f)
			return f
		}
		// Each shown to at most 2 decimals (1 from 10 up).
		if r, w, tot := num(mibNow[1]), num(mibNow[2]), num(mibNow[3]); tot < r+w-0.11 || tot > r+w+0.11 || tot <= 0 {
			t.Errorf("total %v MiB/s, read %v + write %v", tot, r, w)
		}
	}
	owner.waitText("#chart-mibps .chart-note", "applies to read and write together", time.Second)
	// Latency is the server's, labelled so, with what it leaves out.
	owner.waitText("#chart-latency figcaption", "Latency, server-side (ms)", time.Second)
	owner.waitText("#chart-latency .chart-note", "the network, their own queues, and at the QoS ceiling the shaper holding replies", time.Second)
	// Space used from the metrics' usedBytes, read with the charts every 10 s,
	// not the API's usedGib rounded up to 1 GiB: the bar shows the bytes.
	if readBar(); !regexp.MustCompile(`^[0-9.,]+ (bytes|KiB|MiB) of 1 GiB$`).MatchString(bar.Text) || bar.Unknown || bar.Value <= 0 || bar.Value >= 0.5 {
		t.Errorf("space used in vol1 under load: %+v, want the bytes (64 MiB written) drawn", bar)
	}
	owner.shot("volume-charts-under-load")
	// The picture for docs/ (BASIN_CONSOLE_DOCS=docs/console-volume.png): the
	// volume page from its heading to the charts.
	if docs := os.Getenv("BASIN_CONSOLE_DOCS"); docs != "" {
		var buf []byte
		owner.run(browser.Resize(1280, 1240), chromedp.Sleep(500*time.Millisecond), chromedp.Evaluate(`window.scrollTo(0, 0)`, nil),
			chromedp.CaptureScreenshot(&buf), browser.Resize(1280, 800))
		if err := os.WriteFile(docs, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("docs screenshot: %s", docs)
	}
	// A narrow window (a phone): everything reflows, nothing runs off the side.
	owner.run(browser.Resize(390, 844))
	time.Sleep(500 * time.Millisecond)
	var overflow bool
	owner.eval(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow)
	if overflow {
		t.Errorf("the volume page is wider than a 390 px window")
	}
	owner.shot("volume-narrow")
	owner.run(browser.Resize(1280, 800))
	if err := <-benchDone; err != nil {
		t.Fatalf("basin bench: %v", err)
	}

	// Operations, Active Directory.
	owner.page("operations", "Operations")
	owner.waitText("main table", "Done in", 10*time.Second)
	// Full names, each with a copy button, which `basin operations get` takes.
	var opRows struct {
		Names   []string `json:"names"`
		Buttons int      `json:"buttons"`
	}
	owner.eval(`({names: [...document.querySelectorAll("main tbody th code")].map((c) => c.textContent),
		buttons: document.querySelectorAll("main tbody th button[aria-label^='Copy the name of operation ']").length})`, &opRows)
	if len(opRows.Names) == 0 || opRows.Buttons != len(opRows.Names) {
		t.Errorf("operations page: %d names, %d copy buttons", len(opRows.Names), opRows.Buttons)
	}
	for _, name := range opRows.Names {
		if !strings.HasPrefix(name, "projects/p1/locations/us-east4/operations/operation-") {
			t.Errorf("operation name %q is not a full name", name)
		}
	}
	if len(opRows.Names) > 0 {
		out, err := exec.Command(basinBin, "operations", "get", opRows.Names[0], "--endpoint", "http://"+s.addr, "--key-file", s.ownerKey(),
			"--project", "p1", "--location", "us-east4", "-o", "json").CombinedOutput()
		var got client.Object
		if err != nil || json.Unmarshal(out, &got) != nil || got["name"] != opRows.Names[0] {
			t.Errorf("basin operations get %s (pasted from the page): %v\n%s", opRows.Names[0], err, out)
		}
	}
	owner.shot("operations")
	owner.page("activeDirectories", "Active Directory")
	owner.shot("active-directory")
	owner.page("activeDirectories/new", "Add an Active Directory connection")
	owner.shot("active-directory-add")

	// A viewer, signed in with a key file: read-only pages, no 403s.
	viewerKey := viewerAccount(t, c)
	viewer := openTab(t, base, shots, 1280, 800)
	viewer.run(chromedp.Navigate(base + "/console/"))
	viewer.waitText("main h1", "Sign in", 20*time.Second)
	viewer.checkLabels()
	viewer.shot("sign-in")
	viewer.run(chromedp.SetUploadFiles(`input[name=keyFile]`, []string{viewerKey}, chromedp.ByQuery))
	viewer.fill("project", "p1")
	viewer.click(`//button[normalize-space()="Sign in"]`)
	viewer.waitText("main h1", "Volumes", 20*time.Second)
	viewer.waitText("main table", "vol1", 10*time.Second)
	for _, p := range []struct{ route, heading string }{{"volumes", "Volumes"}, {"pools", "Storage pools"},
		{"volumes/vol1", "Volume vol1"}, {"activeDirectories", "Active Directory"}, {"operations", "Operations"}} {
		viewer.page(p.route, p.heading)
		if p.route == "volumes/vol1" {
			viewer.waitText("#chart-iops .chart-now", "Now:", 20*time.Second)
			viewer.shot("viewer-volume")
		}
		var acts []string
		viewer.eval(`[...document.querySelectorAll("main a.button.primary, main form button, main .row-actions button, main button.danger")].map((b) => b.textContent)`, &acts)
		if len(acts) > 0 {
			t.Errorf("the viewer sees actions on %s: %q", p.route, acts)
		}
	}
	viewer.mu.Lock()
	if len(viewer.denied) > 0 {
		t.Errorf("the viewer's console met 403s: %v", viewer.denied)
	}
	viewer.mu.Unlock()
	viewer.finish()

	// Delete the volume (and its snapshot).
	owner.page("volumes/vol1", "Volume vol1")
	owner.run(chromedp.Click(`input[name=force]`, chromedp.ByQuery))
	owner.click(`//button[normalize-space()="Delete volume"]`)
	owner.confirm()
	owner.waitText("main h1", "Volumes", 60*time.Second)
	owner.waitText("main", "No volumes in this location yet.", 30*time.Second)
	var ae *client.Error
	if err := c.Do(context.Background(), "GET", loc+"/volumes/vol1", nil, nil, nil); !errors.As(err, &ae) || ae.HTTPStatus != 404 {
		t.Errorf("vol1 after the console deleted it: %v", err)
	}

	// The link worked once: opened again, it is refused.
	owner.run(chromedp.Navigate(link))
	owner.waitText("main", "unknown, used or expired", 20*time.Second)
	owner.finish()
	owner.mu.Lock()
	if len(owner.denied) > 0 {
		t.Errorf("the owner's console met 403s: %v", owner.denied)
	}
	owner.mu.Unlock()
}

// viewerAccount makes a service account holding roles/netapp.viewer on p1 and
// returns the path of its key file.
func viewerAccount(t *testing.T, c *client.Client) string {
	t.Helper()
	var sa client.Object
	if err := c.Do(context.Background(), "POST", "/v1/projects/p1/serviceAccounts", nil,
		map[string]any{"accountId": "viewer", "serviceAccount": map[string]any{"displayName": "viewer"}}, &sa); err != nil {
		t.Fatal(err)
	}
	email := sa["email"].(string)
	var key client.Object
	if err := c.Do(context.Background(), "POST", "/v1/projects/p1/serviceAccounts/"+email+"/keys", nil, map[string]any{}, &key); err != nil {
		t.Fatal(err)
	}
	data, err := base64.StdEncoding.DecodeString(key["privateKeyData"].(string))
	if err != nil || !json.Valid(data) {
		t.Fatalf("key data: %v", err)
	}
	path := filepath.Join(t.TempDir(), "viewer-key.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(context.Background(), "POST", "/v1/projects/p1:setIamPolicy", nil, map[string]any{"policy": map[string]any{
		"bindings": []any{map[string]any{"role": "roles/netapp.viewer", "members": []string{"serviceAccount:" + email}}}}}, nil); err != nil {
		t.Fatal(err)
	}
	return path
}
