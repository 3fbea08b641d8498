package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// exitCodeOf is a finished command's exit code (-1 when it did not exit).
func exitCodeOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// SIGTERM ends an interrupted train with 143 (128 + 15), not 130.
func TestTrainSIGTERMExits143(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rllm train")
	}
	dir := t.TempDir()
	cmd := rllmCmd(dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForLines(t, dir, 2)
	cmd.Process.Signal(syscall.SIGTERM)
	if code := exitCodeOf(cmd.Wait()); code != 143 {
		t.Fatalf("exit %d after SIGTERM, want 143\n%s", code, stderr.String())
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServeProcess runs `rllm serve --port 0 args...` as a real process
// and returns it with its base URL and stderr.
func startServeProcess(t *testing.T, args ...string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve", "--port", "0", "backend.local.d_model=16", "backend.local.heads=2", "backend.local.layers=1", "backend.local.context=32"}, args...)...)
	cmd.Env = append(os.Environ(), "RLLM_TEST_AS_MAIN=1")
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	stderr := &lockedBuffer{}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		re := regexp.MustCompile(`on (http://[0-9.:]+)`)
		for sc.Scan() {
			stderr.Write(append(sc.Bytes(), '\n'))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			}
		}
		io.Copy(stderr, pr)
	}()
	select {
	case u := <-urlc:
		return cmd, u, stderr
	case <-time.After(time.Minute):
		t.Fatalf("serve did not start:\n%s", stderr.String())
	}
	return nil, "", nil
}

// With a request in flight, Ctrl-C starts a graceful shutdown; a second
// Ctrl-C exits at once (130), saying what was left undone. SIGTERM to an
// idle server shuts it down cleanly.
func TestServeSecondSignalExitsAtOnce(t *testing.T) {
	cmd, url, stderr := startServeProcess(t)
	if resp, err := http.Post(url+"/pause_generation", "application/json", strings.NewReader(`{"mode":"in_place"}`)); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	go func() {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a","max_tokens":2}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(metricsText(t, url), "vllm:num_requests_waiting{model_name=\"local\"} 1") {
		if time.Now().After(deadline) {
			t.Fatal("the request never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(os.Interrupt)
	for !strings.Contains(stderr.String(), "letting 1 requests in flight finish") {
		if time.Now().After(deadline) {
			t.Fatalf("no shutdown line:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(os.Interrupt)
	code := exitCodeOf(cmd.Wait())
	if code != 130 || !strings.Contains(stderr.String(), "interrupted again: exiting now; left undone: answering the 1 requests in flight") {
		t.Fatalf("exit %d after two SIGINTs:\n%s", code, stderr.String())
	}

	cmd, _, stderr = startServeProcess(t)
	cmd.Process.Signal(syscall.SIGTERM)
	if code := exitCodeOf(cmd.Wait()); code != 0 {
		t.Fatalf("exit %d after SIGTERM to an idle server (a clean shutdown):\n%s", code, stderr.String())
	}
}

func metricsText(t *testing.T, url string) string {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// At shutdown a request still running after the grace period is answered
// (finish_reason "abort"), not cut off; serve returns cleanly.
func TestServeShutdownAnswersInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, _, done := startServe(t, ctx, &serveOptions{grace: 50 * time.Millisecond,
		args: []string{"backend.local.d_model=16", "backend.local.heads=2", "backend.local.layers=1", "backend.local.context=32"}})
	url := "http://" + addr
	resp, err := http.Post(url+"/pause_generation", "application/json", strings.NewReader(`{"mode":"in_place"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	type answer struct {
		code int
		body string
		err  error
	}
	res := make(chan answer, 1)
	go func() {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a","max_tokens":2}`))
		if err != nil {
			res <- answer{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- answer{resp.StatusCode, string(b), err}
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(metricsText(t, url), "num_requests_waiting{model_name=\"local\"} 1") {
		if time.Now().After(deadline) {
			t.Fatal("the request never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	a := <-res
	if a.err != nil || a.code != 200 || !strings.Contains(a.body, `"finish_reason":"abort"`) {
		t.Fatalf("in-flight request at shutdown: %d %q %v, want 200 with finish_reason abort", a.code, a.body, a.err)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// serve --output json writes JSON lines on stderr too, from its first
// line to its shutdown.
func TestServeJSONLines(t *testing.T) {
	cmd, url, stderr := startServeProcess(t, "--output", "json")
	if resp, err := http.Post(url+"/update_weights_from_disk", "application/json", strings.NewReader(`{"model_path":"/nowhere"}`)); err == nil {
		resp.Body.Close()
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if code := exitCodeOf(cmd.Wait()); code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) < 2 {
		t.Fatalf("stderr:\n%s", stderr.String())
	}
	for _, line := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Errorf("stderr line is not a JSON object: %q", line)
		}
	}
}

// Two SIGINTs to a training run: it exits 130 either way; when the second
// arrives before the clean stop (the checkpoint) is done, it exits at once
// and says what was left undone.
func TestTrainSecondSIGINT(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rllm train")
	}
	dir := t.TempDir()
	cmd := rllmCmd(dir)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitForLines(t, dir, 2)
	cmd.Process.Signal(os.Interrupt)
	cmd.Process.Signal(os.Interrupt)
	if code := exitCodeOf(cmd.Wait()); code != 130 {
		t.Fatalf("exit %d after two SIGINTs, want 130\n%s", code, stderr.String())
	}
	if s := stderr.String(); strings.Contains(s, "again: exiting now") && !strings.Contains(s, "left undone: the checkpoint of the last completed step") {
		t.Fatalf("the second SIGINT did not say what was left undone:\n%s", s)
	}
}
