package view

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rllm-org/rllm-go/pkg/config"
	"github.com/rllm-org/rllm-go/pkg/trainer"

	_ "github.com/rllm-org/rllm-go/pkg/backend/local"
	_ "github.com/rllm-org/rllm-go/pkg/tasks"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write the browser test's screenshots to docs/images (docs/view.md shows them)")

// browser starts Debian's chromium headless, as root on a CI machine
// needs it. Without chromium the test skips, unless RLLM_REQUIRE_CHROMIUM=1
// (.ci/run sets it after installing chromium).
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("RLLM_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("chromium is not installed and RLLM_REQUIRE_CHROMIUM=1: apt-get install chromium")
		}
		t.Skip("chromium is not installed (apt-get install chromium); RLLM_REQUIRE_CHROMIUM=1 makes this a failure")
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1440, 960))
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// waitFor polls a JavaScript predicate until it is true.
func waitFor(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(90*time.Second))); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("main").innerText.slice(0, 2000)`))
		t.Fatalf("%s: %v; the page shows:\n%s", what, err, html)
	}
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := t.TempDir()
	if *updateScreenshots {
		dir = filepath.Join("..", "..", "docs", "images")
		os.MkdirAll(dir, 0o755)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func trainConfig(t *testing.T, dir string, steps int) *config.Config {
	c, err := config.FromOverrides([]string{
		"trainer.default_local_dir=" + filepath.ToSlash(dir),
		"data.train_batch_size=4", "rollout.n=4", "data.generated_train_size=64", "data.generated_val_size=8",
		"backend.local.d_model=32", "backend.local.heads=2", "backend.local.context=48", "backend.local.warmup_steps=20",
		fmt.Sprintf("trainer.total_training_steps=%d", steps), "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.save_freq=1",
		"trainer.logger=[jsonl]", "rollout.max_tokens=4", "workflow.n_parallel_tasks=8",
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func train(t *testing.T, c *config.Config) error {
	tr, err := trainer.New(context.Background(), c, trainer.Options{})
	if err != nil {
		return err
	}
	defer tr.Close()
	_, err = tr.Train(context.Background())
	return err
}

// As a person uses it: the runs list, a chart that gains a point while
// rllm train writes a step, episodes filtered by reward, one opened and
// its tokens read.
func TestBrowser(t *testing.T) {
	ctx := browser(t)
	root := t.TempDir()
	fixtureRun(t, filepath.Join(root, "grpo-lr1e-3"), 60, 64, 1e-3)
	fixtureRun(t, filepath.Join(root, "grpo-lr3e-3"), 40, 64, 3e-3)
	fixtureEval(t, filepath.Join(root, "eval-math.jsonl"))
	live := filepath.Join(root, "live")
	if err := train(t, trainConfig(t, live, 1)); err != nil {
		t.Fatal(err)
	}
	s, err := New([]string{root}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	base := strings.Replace(ts.URL, "127.0.0.1", "localhost", 1)

	t.Run("runs", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1440, 640), chromedp.Navigate(base+"/")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the runs list", `document.querySelectorAll("#runs tr.run").length === 4`)
		names := eval[[]string](t, ctx, `[...document.querySelectorAll("#runs tr.run .name")].map(e => e.textContent)`)
		for _, want := range []string{"grpo-lr1e-3", "grpo-lr3e-3", "eval-math.jsonl", "live"} {
			if !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "/"+want) }) {
				t.Errorf("runs list %v lacks %s", names, want)
			}
		}
		row := eval[string](t, ctx, `[...document.querySelectorAll("#runs tr.run")].find(r => r.querySelector(".name").textContent.endsWith("/grpo-lr3e-3")).innerText`)
		if !strings.Contains(row, "finished") || !strings.Contains(row, "40 / 40") || !strings.Contains(row, "0.003") {
			t.Errorf("the grpo-lr3e-3 row reads %q; want finished, 40 / 40 and its lr", row)
		}
		screenshot(t, ctx, "view-runs.png")
	})

	t.Run("live chart", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(1440, 960), chromedp.Navigate(base+"/#run=0:live&tab=metrics")); err != nil {
			t.Fatal(err)
		}
		chart := `document.querySelector('.chart[data-key="critic/score/mean"]')`
		waitFor(t, ctx, "the reward chart with step 1", chart+` && `+chart+`.dataset.points === "1"`)
		done := make(chan error, 1)
		go func() { done <- train(t, trainConfig(t, live, 2)) }() // resumes at step 2
		waitFor(t, ctx, "the reward chart gaining step 2 without a reload", chart+`.dataset.points === "2"`)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("overlaid and smoothed", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#run=0:grpo-lr1e-3,0:grpo-lr3e-3&tab=metrics")); err != nil {
			t.Fatal(err)
		}
		chart := `document.querySelector('.chart[data-key="critic/score/mean"]')`
		waitFor(t, ctx, "two runs on one chart", chart+` && `+chart+`.dataset.points === "100"`)
		screenshot(t, ctx, "view-metrics.png")
	})

	t.Run("episodes", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#run=0:grpo-lr1e-3&tab=episodes&step=60")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the episodes list", `document.querySelectorAll("#ep-list tr.ep").length === 50`)
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#ep-min-reward"), "1"), chromedp.Click(chromedp.CSS("#ep-apply"))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the list filtered by reward", `document.getElementById("ep-count")?.textContent === "16 of 64 episodes"`)
		rewards := eval[[]string](t, ctx, `[...document.querySelectorAll("#ep-list tr.ep .reward")].map(e => e.textContent)`)
		if len(rewards) != 16 || slices.ContainsFunc(rewards, func(r string) bool { return r != "1" }) {
			t.Errorf("rewards listed %v, want 16 of 1", rewards)
		}
		// Open episode 11 (reward 1, odd: masked tokens; 11 % 8 = 3: truncated).
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#ep-list tr.ep[data-i="11"]`))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "episode 11's tokens", `document.querySelectorAll("#tokens > span.tok").length === 5`)
		want := fixtureRecord(60, 11)
		ids := eval[[]string](t, ctx, `[...document.querySelectorAll("#tokens > span.tok")].map(s => s.dataset.id)`)
		text := eval[[]string](t, ctx, `[...document.querySelectorAll("#tokens > span.tok")].map(s => s.textContent)`)
		masked := eval[[]bool](t, ctx, `[...document.querySelectorAll("#tokens > span.tok")].map(s => s.classList.contains("masked"))`)
		for j, id := range want.Samples[0].ResponseIDs {
			if ids[j] != fmt.Sprint(id) || text[j] != want.Pieces[id] || masked[j] != (want.Samples[0].LossMask[j] == 0) {
				t.Errorf("token %d shows id %s %q masked %v; want %d %q masked %v", j, ids[j], text[j], masked[j], id, want.Pieces[id], want.Samples[0].LossMask[j] == 0)
			}
		}
		if !eval[bool](t, ctx, `!!document.getElementById("truncated") && !!document.getElementById("tok-truncated")`) {
			t.Error("the truncated episode is not marked")
		}
		conv := eval[string](t, ctx, `document.getElementById("conversation").innerText`)
		if !strings.Contains(conv, "answer 11 at step 60") {
			t.Errorf("the conversation reads %q", conv)
		}
		screenshot(t, ctx, "view-episode.png")
		// The same task across steps.
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#same-task"))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the task across 60 steps", `document.querySelectorAll("#task-hits tbody tr").length === 240`)
	})

	t.Run("eval", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#run=0:eval-math.jsonl&tab=eval")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the pass@k table", `!!document.getElementById("passk")`)
		tbl := eval[string](t, ctx, `document.getElementById("passk").innerText`)
		if !strings.Contains(tbl, "pass@4") || !strings.Contains(tbl, "0.250") || !strings.Contains(tbl, "0.667") {
			t.Errorf("pass@k table reads %q", tbl)
		}
	})
}
