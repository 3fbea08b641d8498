package view

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rllm-org/rllm-go/pkg/episodestore"
)

// bigRun is a run of 1,000 steps × 256 episodes (256,000), written once
// per benchmark process.
var bigRun = struct {
	once sync.Once
	dir  string
}{}

func bigRunDir(b *testing.B) string {
	bigRun.once.Do(func() {
		dir, err := os.MkdirTemp("", "rllm-view-bench")
		if err != nil {
			b.Fatal(err)
		}
		run := filepath.Join(dir, "big")
		fixtureRun(b, run, 1, 256, 1e-3) // config, metrics, step 1
		fixtureRun(b, filepath.Join(dir, "metrics-only"), 1000, 0, 1e-3)
		os.Rename(filepath.Join(dir, "metrics-only", "metrics.jsonl"), filepath.Join(run, "metrics.jsonl"))
		os.WriteFile(filepath.Join(run, "latest_checkpointed_iteration.txt"), []byte("1000"), 0o644)
		os.RemoveAll(filepath.Join(dir, "metrics-only"))
		tdir := episodestore.PhaseDir(run, episodestore.PhaseTrain)
		for s := 2; s <= 1000; s++ {
			writeFixtureStep(b, tdir, s, 256)
		}
		bigRun.dir = dir
	})
	return bigRun.dir
}

// BenchmarkOpenBigRun is the server's side of opening a 256,000-episode
// run: the runs list, all metrics, the list of steps and the first page
// of the last step's episodes (its index read cold), then one episode.
func BenchmarkOpenBigRun(b *testing.B) {
	dir := bigRunDir(b)
	for b.Loop() {
		s, _ := New([]string{dir}, Options{})
		ts := httptest.NewServer(s.Handler())
		for _, p := range []string{"/api/runs", "/api/metrics?run=0:big", "/api/steps?run=0:big", "/api/episodes?run=0:big&step=1000", "/api/episode?run=0:big&step=1000&i=17"} {
			resp, err := http.Get(ts.URL + p)
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("%s: %v %v", p, resp, err)
			}
			resp.Body.Close()
		}
		ts.Close()
	}
}

// BenchmarkViewBigRunBrowser is what a person waits for in chromium on
// that run: the episodes page painted with its list (ms_list), and an
// episode opened to its tokens (ms_episode). Needs chromium.
func BenchmarkViewBigRunBrowser(b *testing.B) {
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		b.Skip("chromium is not installed")
	}
	dir := bigRunDir(b)
	s, _ := New([]string{dir}, Options{})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	base := strings.Replace(ts.URL, "127.0.0.1", "localhost", 1)
	alloc, cancelAlloc := chromedp.NewExecAllocator(b.Context(),
		chromedp.ExecPath("/usr/bin/chromium"), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(b.TempDir()), chromedp.WindowSize(1440, 960))
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		b.Fatal(err)
	}
	poll := func(expr string) {
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(5*time.Millisecond), chromedp.WithPollingTimeout(60*time.Second))); err != nil {
			b.Fatal(err)
		}
	}
	var list, open, paint time.Duration
	n := 0
	for b.Loop() {
		s.mu.Lock()
		clear(s.cache) // every open reads the step's index again
		s.mu.Unlock()
		chromedp.Do(ctx, chromedp.Navigate("about:blank"))
		start := time.Now()
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#run=0:big&tab=episodes")); err != nil {
			b.Fatal(err)
		}
		poll(`document.querySelectorAll("#ep-list tr.ep").length === 50`)
		list += time.Since(start)
		fcp, _ := chromedp.Run(ctx, chromedp.Evaluate[float64](`(performance.getEntriesByName("first-contentful-paint")[0] || {startTime: 0}).startTime`))
		paint += time.Duration(fcp * float64(time.Millisecond))
		start = time.Now()
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#ep-list tr.ep[data-i="17"]`))); err != nil {
			b.Fatal(err)
		}
		poll(`document.querySelectorAll("#tokens > span.tok").length === 5`)
		open += time.Since(start)
		n++
	}
	b.ReportMetric(float64(paint.Milliseconds())/float64(n), "ms_first_paint")
	b.ReportMetric(float64(list.Milliseconds())/float64(n), "ms_list")
	b.ReportMetric(float64(open.Milliseconds())/float64(n), "ms_episode")
}
