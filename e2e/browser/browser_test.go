package browser

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

var updateScreenshots = flag.Bool("update-screenshots", false,
	"write the README's console screenshots (docs/screenshots/*.png) from this run")

var keepScreenshots = flag.Bool("keep-screenshots", false, "keep the screenshot of every step even when the test passes")

// screenshotDir is where -update-screenshots writes, relative to this package.
const screenshotDir = "../../docs/screenshots"

// findChromium returns Debian's chromium. There is no fallback to a downloaded browser: without one the
// test fails and says how to install it.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium found: the browser tests need Debian's chromium (apt-get install chromium); .ci/run installs it")
	return ""
}

// browser is one headless Chromium with a fresh profile, one tab, and a directory of screenshots
// taken after each step (kept when the test fails, removed when it passes).
type browser struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	step int
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := findChromium(t)
	profile := t.TempDir()
	shots, err := os.MkdirTemp("", "configsync-console-screenshots-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || *keepScreenshots {
			t.Logf("screenshots of every step: %s", shots)
			return
		}
		_ = os.RemoveAll(shots)
	})
	// The machine's network is closed: every background connection Chromium would make is switched off.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1280, 860),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	deadline, cancelDeadline := context.WithTimeout(ctx, 100*time.Second)
	t.Cleanup(func() {
		cancelDeadline()
		cancelCtx()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	return &browser{t: t, ctx: deadline, dir: shots}
}

// do runs one named step; on failure it fails the test with the step's name and a screenshot path.
func (b *browser) do(name string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	err := chromedp.Do(b.ctx, steps...)
	shot := b.screenshot(name)
	if err != nil {
		b.t.Fatalf("step %q: %v (screenshot: %s)", name, err, shot)
	}
}

// screenshot saves the visible page as the next numbered PNG and returns its path.
func (b *browser) screenshot(name string) string {
	b.step++
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		return "none: " + err.Error()
	}
	path := filepath.Join(b.dir, fmt.Sprintf("%02d-%s.png", b.step, strings.ReplaceAll(name, " ", "-")))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return "none: " + err.Error()
	}
	return path
}

// text returns the text of the first element matching a CSS selector.
func (b *browser) text(css string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		b.t.Fatalf("text of %s: %v (screenshot: %s)", css, err, b.screenshot("text"))
	}
	return s
}

// eval runs a JavaScript expression that must be true.
func (b *browser) check(what, expr string) {
	b.t.Helper()
	ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
	if err != nil || !ok {
		b.t.Fatalf("%s: %s is %v (%v; screenshot: %s)", what, expr, ok, err, b.screenshot("check"))
	}
}

// waitFor waits (polling, generous deadline) until a JavaScript expression is true.
func (b *browser) waitFor(what, expr string, timeout time.Duration) {
	b.t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		b.t.Fatalf("waiting for %s (%s): %v (screenshot: %s)", what, expr, err, b.screenshot("wait"))
	}
}

// saveScreenshot writes the visible page into the repository (only with -update-screenshots).
func (b *browser) saveScreenshot(name string) {
	b.t.Helper()
	if !*updateScreenshots {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(screenshotDir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s (%d KB)", path, len(png)/1024)
}

// scripts switches the page's JavaScript on or off (DevTools' own evaluations still run).
func scripts(on bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: !on})
		return err
	})
}

// TestConsoleInBrowser walks an operator's session in headless Chromium against the real stack: sign in,
// the overview, an environment config edited with its dry-run diff and saved, the agent's apply status
// turning applied on the host page (live, through htmx polling), a 412 when another writer got there
// first, and sign-out.
func TestConsoleInBrowser(t *testing.T) {
	s := startStack(t)
	// A second host whose hostname is markup: the browser must show it as text.
	const hostile = `<script>alert(1)</script>`
	s.api(http.MethodPost, "/api/v1/environments/"+s.envID+"/hosts", map[string]string{"hostname": hostile}, nil)
	b := newBrowser(t)

	// Sign in, with the keyboard only: any console page sends an anonymous browser to the sign-in form,
	// Tab moves past the skip link and the header's link to the token field, Enter submits.
	b.do("sign-in form", chromedp.Navigate(s.url+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	b.do("tab to the token field", chromedp.KeyEvent("\t"), chromedp.KeyEvent("\t"), chromedp.KeyEvent("\t"))
	b.check("the token field has the focus after three tabs", `document.activeElement === document.getElementById("token")`)
	b.do("sign in",
		chromedp.KeyEvent(s.token),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS(".summary")),
	)
	if h1 := b.text("main h1"); h1 != "Fleet overview" {
		t.Fatalf("after sign-in the page is %q", h1)
	}
	// The overview refreshes itself (htmx polling): the summary element is replaced without a reload.
	b.check("mark the page and its summary", `(window.consoleMark = 1, document.querySelector(".summary").dataset.old = "1", true)`)
	b.waitFor("the overview summary refreshed in place", `window.consoleMark === 1 && document.querySelector(".summary") !== null && document.querySelector(".summary").dataset.old === undefined`, 30*time.Second)
	b.waitFor("the agent's host online on the overview", `document.querySelector('[data-count="online"]')?.textContent.trim() === "1"`, 45*time.Second)
	// Drifted and stale come from the periodic fleet stats (every second in this stack), shown as of their
	// computation once the polled summary picks them up.
	b.waitFor("the drift counts computed", `document.querySelector('[data-count="drifted"]:not([data-pending])') !== null`, 30*time.Second)
	b.saveScreenshot("overview")

	// Hosts: the hostile hostname is text, and no script but htmx ever ran.
	b.do("hosts", chromedp.Navigate(s.url+"/ui/hosts?env="+s.envID), chromedp.WaitVisible(chromedp.CSS("table.hosts")))
	b.check("the hostile hostname shown as text", `document.querySelector("table.hosts").innerText.includes("<script>alert(1)</script>")`)
	b.check("no injected script element", `document.querySelectorAll("script").length === 1`)

	// Edit the environment's labels: the dry run shows the per-host diff, then save.
	editor := s.url + "/ui/environments/" + s.envID + "/configs/labels"
	b.do("editor", chromedp.Navigate(editor), chromedp.WaitVisible(chromedp.ID("config_data")))
	b.do("dry run",
		chromedp.SetValue(chromedp.ID("config_data"), `{"static": {"team": "payments", "tier": "web"}}`),
		chromedp.Click(chromedp.ID("dry-run-button")),
		chromedp.WaitVisible(chromedp.ID("dry-run")),
	)
	diff := b.text("#dry-run")
	if !strings.Contains(diff, "web-1.acme.internal") || !strings.Contains(diff, `"team": "payments"`) {
		t.Fatalf("the dry run does not show the host's diff:\n%s", diff)
	}
	if status, _ := s.call(http.MethodGet, "/api/v1/environments/"+s.envID+"/agent-configs/labels", nil); status != http.StatusNotFound {
		t.Fatalf("the dry run saved something (GET answers %d)", status)
	}
	b.do("save", chromedp.Click(chromedp.ID("save-button")), chromedp.WaitVisible(chromedp.ID("saved")))
	saved := b.text("#saved")
	var version int64
	if _, err := fmt.Sscanf(saved, "Saved as version %d.", &version); err != nil {
		t.Fatalf("after saving: %q", saved)
	}

	// The host page: the agent applies the change and the page shows it without a reload.
	b.do("host page", chromedp.Navigate(s.url+"/ui/hosts/"+s.hostID), chromedp.WaitVisible(chromedp.ID("configs")))
	b.check("mark the host page", `(window.consoleMark = 2, document.querySelector("#live").dataset.old = "1", true)`)
	b.waitFor("the host page refreshed in place", `window.consoleMark === 2 && document.querySelector("#live") !== null && document.querySelector("#live").dataset.old === undefined`, 30*time.Second)
	b.waitFor("labels applied on the host page",
		fmt.Sprintf(`(document.querySelector('.apply[data-type="labels"]')?.textContent || "").includes("applied v%d")`, version), 60*time.Second)
	b.check("the provenance of the effective config", `document.querySelector("#type-labels").innerText.includes("environment")`)
	// With the change applied, the agent's next heartbeat reports the expected hash.
	b.waitFor("the host's hash in agreement", `document.querySelector("#agreement")?.textContent.trim() === "in sync"`, 60*time.Second)
	b.saveScreenshot("host-detail")

	// Read-only pages read without JavaScript: the same host page with scripts switched off.
	b.do("scripts off", scripts(false), chromedp.Navigate(s.url+"/ui/hosts/"+s.hostID), chromedp.WaitVisible(chromedp.ID("configs")))
	b.check("htmx did not run", `typeof window.htmx === "undefined"`)
	b.check("the host page reads without JavaScript",
		fmt.Sprintf(`document.querySelector('.apply[data-type="labels"]').textContent.includes("applied v%d")`, version))
	b.do("scripts on", scripts(true))

	// Another writer gets there first: the console's save answers the conflict and overwrites nothing.
	b.do("editor again", chromedp.Navigate(editor), chromedp.WaitVisible(chromedp.ID("config_data")))
	b.do("second dry run",
		chromedp.SetValue(chromedp.ID("config_data"), `{"static": {"team": "checkout"}}`),
		chromedp.Click(chromedp.ID("dry-run-button")),
		chromedp.WaitVisible(chromedp.ID("save-button")),
	)
	s.api(http.MethodPut, "/api/v1/environments/"+s.envID+"/agent-configs/labels",
		map[string]any{"config_data": map[string]any{"static": map[string]string{"team": "other-writer"}}}, nil)
	b.do("conflicting save", chromedp.Click(chromedp.ID("save-button")), chromedp.WaitVisible(chromedp.ID("conflict")))
	if c := b.text("#conflict"); !strings.Contains(c, "other-writer") {
		t.Fatalf("the conflict does not show the other writer's version:\n%s", c)
	}
	var stored struct {
		ConfigData map[string]map[string]string `json:"config_data"`
	}
	s.api(http.MethodGet, "/api/v1/environments/"+s.envID+"/agent-configs/labels", nil, &stored)
	if stored.ConfigData["static"]["team"] != "other-writer" {
		t.Fatalf("the conflicting save overwrote the other writer: %v", stored.ConfigData)
	}

	// A staged rollout from the editor: plan typed as stages and bake, started after the dry run; the
	// browser lands on the rollout's page (stage 0 baking), pauses it and aborts it with its forms.
	b.do("editor for a rollout", chromedp.Navigate(editor), chromedp.WaitVisible(chromedp.ID("config_data")))
	b.do("rollout dry run",
		chromedp.SetValue(chromedp.ID("config_data"), `{"static": {"team": "canary"}}`),
		chromedp.SetValue(chromedp.ID("plan-stages"), "1,100%"),
		chromedp.SetValue(chromedp.ID("plan-bake"), "3600"),
		chromedp.Click(chromedp.ID("dry-run-button")),
		chromedp.WaitVisible(chromedp.ID("rollout-button")),
	)
	b.do("start the rollout", chromedp.Click(chromedp.ID("rollout-button")), chromedp.WaitVisible(chromedp.ID("rollout-pause")))
	b.check("the rollout runs with stage 0 baking", `document.querySelector("#rollout-state").textContent === "running" && `+
		`document.querySelector('[data-stage="0"]').dataset.stageState === "baking"`)
	b.do("pause the rollout", chromedp.Click(chromedp.ID("rollout-pause")), chromedp.WaitVisible(chromedp.ID("rollout-resume")))
	b.check("the rollout is paused", `document.querySelector("#rollout-state").textContent === "paused"`)
	b.do("abort the rollout", chromedp.Click(chromedp.ID("rollout-abort")), chromedp.WaitNotPresent(chromedp.ID("rollout-abort")))
	b.check("the rollout ended", `["reverted", "aborted"].includes(document.querySelector("#rollout-state").textContent)`)

	// Sign out: back to the sign-in form, and the console is closed to this browser.
	b.do("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("token")))
	b.do("after sign-out", chromedp.Navigate(s.url+"/ui/hosts/"+s.hostID), chromedp.WaitVisible(chromedp.ID("token")))

	// A session that ends on the server (expired, or its token revoked) sends an open overview back to the
	// sign-in form at its next refresh.
	b.do("sign in again",
		chromedp.SendKeys(chromedp.ID("token"), s.token),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS("#configs")), // back where it was going: the host page
	)
	b.do("overview again", chromedp.Navigate(s.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS(".summary")))
	if _, err := s.pool.Exec(b.ctx, `UPDATE console_sessions SET expires_at = now()`); err != nil {
		t.Fatal(err)
	}
	// The page navigates by itself, which ends any in-page poll: ask for the location from outside.
	deadline := time.Now().Add(30 * time.Second)
	for {
		loc, err := chromedp.Run(b.ctx, chromedp.Location())
		if err == nil && strings.HasSuffix(loc, "/ui/signin") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired session's overview stayed at %q (%v; screenshot: %s)", loc, err, b.screenshot("expired"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	b.do("sign-in form after expiry", chromedp.WaitVisible(chromedp.ID("token")))
}
