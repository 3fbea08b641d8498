package progress

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock advances only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func decodeLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestJSONRateLimitedLines(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	var buf bytes.Buffer
	p := NewJSON(&buf, Options{Now: clk.Now, Every: 5 * time.Second})
	c := p.Start("rollout", "episodes", 10)
	// Four episodes in 4s: below the period, no progress line.
	for range 4 {
		clk.advance(time.Second)
		c.Add(1)
	}
	clk.advance(time.Second) // 5s since start
	c.Add(1)
	c.Describe("reward 0.5")
	clk.advance(time.Second)
	c.Add(1)
	p.Println("a message")
	clk.advance(4 * time.Second)
	c.Add(4) // 10 done at 10s
	c.Done()
	c.Add(1) // after Done: nothing
	c.Done()

	lines := decodeLines(t, buf.Bytes())
	tests := []struct {
		event       string
		done        float64
		rate, eta   float64
		elapsed     float64
		status      string
		wantMessage string
	}{
		{event: "start", eta: -1},
		{event: "progress", done: 5, rate: 1, eta: 5, elapsed: 5},
		{event: "log", wantMessage: "a message"},
		{event: "done", done: 10, rate: 1, eta: -1, elapsed: 10, status: "reward 0.5"},
	}
	if len(lines) != len(tests) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(tests), buf.String())
	}
	for i, tt := range tests {
		l := lines[i]
		if l["event"] != tt.event {
			t.Errorf("line %d: event %v, want %s", i, l["event"], tt.event)
			continue
		}
		if tt.event == "log" {
			if l["message"] != tt.wantMessage {
				t.Errorf("line %d: message %v", i, l["message"])
			}
			continue
		}
		if l["phase"] != "rollout" || l["unit"] != "episodes" || l["total"] != 10.0 {
			t.Errorf("line %d: %v", i, l)
		}
		if l["done"] != tt.done || l["rate"] != tt.rate || l["elapsed_s"] != tt.elapsed {
			t.Errorf("line %d: done %v rate %v elapsed %v, want %v %v %v", i, l["done"], l["rate"], l["elapsed_s"], tt.done, tt.rate, tt.elapsed)
		}
		eta, has := l["eta_s"]
		if (tt.eta >= 0) != has || (has && eta != tt.eta) {
			t.Errorf("line %d: eta_s %v (present %v), want %v", i, eta, has, tt.eta)
		}
		if got, _ := l["status"].(string); got != tt.status {
			t.Errorf("line %d: status %q, want %q", i, got, tt.status)
		}
	}
}

func TestJSONConcurrentAdds(t *testing.T) {
	var buf bytes.Buffer
	clk := &fakeClock{now: time.Unix(0, 0)}
	p := NewJSON(&buf, Options{Now: clk.Now, Every: time.Nanosecond})
	c := p.Start("validation", "episodes", 800)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				clk.advance(time.Millisecond)
				c.Add(1)
			}
		}()
	}
	wg.Wait()
	c.Done()
	lines := decodeLines(t, buf.Bytes())
	last := lines[len(lines)-1]
	if last["event"] != "done" || last["done"] != 800.0 {
		t.Fatalf("last line %v", last)
	}
}

func TestEstimate(t *testing.T) {
	tests := []struct {
		done, total int64
		elapsed     time.Duration
		rate        float64
		eta         time.Duration
	}{
		{0, 10, time.Second, 0, -1},
		{5, 10, 0, 0, -1},
		{5, 10, 10 * time.Second, 0.5, 10 * time.Second},
		{10, 10, 10 * time.Second, 1, 0},
		{3, 0, 3 * time.Second, 1, 0},
	}
	for _, tt := range tests {
		r, e := estimate(tt.done, tt.total, tt.elapsed)
		if r != tt.rate || e != tt.eta {
			t.Errorf("estimate(%d, %d, %v) = %v, %v; want %v, %v", tt.done, tt.total, tt.elapsed, r, e, tt.rate, tt.eta)
		}
	}
}

// lastFrame is what a terminal shows on the last line: carriage returns
// move back to column 0 and later characters overwrite earlier ones.
func lastFrame(s string) string {
	lines := strings.Split(s, "\n")
	var screen []rune
	col := 0
	for _, r := range lines[len(lines)-1] {
		if r == '\r' {
			col = 0
			continue
		}
		if col < len(screen) {
			screen[col] = r
		} else {
			screen = append(screen, r)
		}
		col++
	}
	return strings.TrimSpace(string(screen))
}

func TestTextBar(t *testing.T) {
	var buf bytes.Buffer
	p := NewText(&buf, Options{Every: time.Nanosecond})
	run := p.Start("train", "steps", 10)
	run.Add(3)
	if f := lastFrame(buf.String()); !strings.HasPrefix(f, "train") || !strings.Contains(f, "3/10") || !strings.Contains(f, "steps") {
		t.Fatalf("bar shows %q", f)
	}
	// A nested phase takes the line; the outer bar does not draw over it.
	ro := p.Start("rollout", "episodes", 64)
	ro.Add(16)
	run.Add(1)
	if f := lastFrame(buf.String()); !strings.HasPrefix(f, "rollout") || !strings.Contains(f, "16/64") {
		t.Fatalf("nested bar shows %q", f)
	}
	ro.Describe("reward 0.25")
	ro.Add(1)
	if f := lastFrame(buf.String()); !strings.Contains(f, "reward 0.25") || !strings.Contains(f, "17/64") {
		t.Fatalf("described bar shows %q", f)
	}
	ro.Done()
	if f := lastFrame(buf.String()); !strings.HasPrefix(f, "train") || !strings.Contains(f, "4/10") {
		t.Fatalf("after the nested phase the line shows %q", f)
	}
	p.Println("step 4/10 | reward 0.5")
	out := buf.String()
	if !strings.Contains(out, "\rstep 4/10 | reward 0.5\n") {
		t.Fatalf("line not written on a cleared line: %q", out)
	}
	if f := lastFrame(out); !strings.HasPrefix(f, "train") {
		t.Fatalf("bar not redrawn after the line: %q", f)
	}
	run.Done()
	run.Add(1)
	if f := lastFrame(buf.String()); f != "" {
		t.Fatalf("bar left on screen after Done: %q", f)
	}
	p.Println("done")
	if !strings.HasSuffix(buf.String(), "done\n") {
		t.Fatalf("line after the bars: %q", buf.String())
	}
}

func TestTextConcurrent(t *testing.T) {
	var buf bytes.Buffer
	p := NewText(&buf, Options{})
	c := p.Start("validation", "episodes", 400)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				c.Add(1)
				if j%25 == 0 {
					p.Println("line")
					c.Describe(strings.Repeat("x", i))
				}
			}
		}()
	}
	wg.Wait()
	c.Done()
	if strings.Count(buf.String(), "line\n") != 16 {
		t.Fatalf("lines lost: %q", buf.String())
	}
}

func TestNop(t *testing.T) {
	c := Nop.Start("x", "y", 1)
	c.Add(1)
	c.Describe("z")
	c.Done()
	Nop.Println("nothing")
}

// JSON lines keep <, > and & as they are: a person reads them too.
func TestJSONLinesAreNotHTMLEscaped(t *testing.T) {
	var buf bytes.Buffer
	p := NewJSON(&buf, Options{})
	p.Println("validation pass@1: 0.078 at step 0 -> 0.812 at step 10 (runs/a&b)")
	want := `{"event":"log","message":"validation pass@1: 0.078 at step 0 -> 0.812 at step 10 (runs/a&b)"}` + "\n"
	if buf.String() != want {
		t.Errorf("line %q, want %q", buf.String(), want)
	}
}

// A download's bar shows sizes and a rate in bytes (kB, MB), and an ETA.
func TestTextBarBytes(t *testing.T) {
	var buf bytes.Buffer
	p := NewText(&buf, Options{Every: time.Nanosecond})
	dl := p.Start("openai/gsm8k/main/train.parquet", "bytes", 50<<20)
	dl.Add(5 << 20)
	time.Sleep(20 * time.Millisecond)
	dl.Add(5 << 20)
	f := lastFrame(buf.String())
	if !strings.Contains(f, "MB") || !strings.Contains(f, "/52 MB") {
		t.Fatalf("bar shows %q", f)
	}
	dl.Done()
}
