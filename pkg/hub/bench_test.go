package hub

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rllm-org/rllm-go/internal/fakehub"
	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/progress"
)

const bigPath = "data/train-00000-of-00001.parquet"

var bigData struct {
	sync.Mutex
	mb   int
	data []byte
}

// bigParquet is one parquet file of about mb MB of incompressible text
// rows (made once per test binary).
func bigParquet(b *testing.B, mb int) []byte {
	bigData.Lock()
	defer bigData.Unlock()
	if bigData.mb == mb {
		return bigData.data
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
	var rows []episode.Task
	for range mb * 1000 {
		q := make([]byte, 1000)
		for i := range q {
			q[i] = letters[rng.IntN(len(letters))]
		}
		rows = append(rows, episode.Task{"question": string(q), "answer": "#### 7"})
	}
	bigData.mb, bigData.data = mb, parquetOf(b, rows)
	return bigData.data
}

// cdnSetup is where the benchmarks' fake CDN runs: in a process of its
// own (as a real CDN is another machine) or in this one, and at what
// rate it sends (bytes a second; 0: as fast as it can).
type cdnSetup struct {
	name    string
	process bool
	rate    int64
}

var (
	inProcess = cdnSetup{"inprocess", false, 0}
	cdns      = []cdnSetup{{"process", true, 0}, {"process-200MBps", true, 200e6}, inProcess}
)

// bigHub holds o/big: one LFS parquet file of about mb MB, its LFS
// redirect pointing at a CDN set up as cdn says.
func bigHub(b *testing.B, mb int, cdn cdnSetup) (*fakehub.Hub, int64, *cdnProc) {
	data := bigParquet(b, mb)
	h := fakehub.New()
	b.Cleanup(h.Close)
	h.Commit("o/big", "main", map[string]fakehub.File{bigPath: {Data: data, LFS: true}})
	h.Throttle = cdn.rate
	var p *cdnProc
	if cdn.process {
		p = startCDNProcess(b, data, cdn.rate)
		h.RedirectTo = p.url
	}
	return h, int64(len(data)), p
}

// cdnEnv names the file a child test process serves as the fake CDN,
// rateEnv its rate.
const cdnEnv, rateEnv = "RLLM_HUB_BENCH_CDN_FILE", "RLLM_HUB_BENCH_CDN_RATE"

// TestFakeCDNProcess is the benchmarks' fake CDN in a process of its own:
// a real CDN is another machine, so the CPU it spends sending is not
// rllm's, and in this process it would compete with rllm for the cores
// under the Go scheduler. It prints its URL and serves until its stdin
// closes; run by anything but startCDNProcess, it skips.
func TestFakeCDNProcess(t *testing.T) {
	path := os.Getenv(cdnEnv)
	if path == "" {
		t.Skip("the benchmarks' CDN process; started by startCDNProcess only")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := fakehub.New()
	defer h.Close()
	h.Throttle, _ = strconv.ParseInt(os.Getenv(rateEnv), 10, 64)
	h.Commit("o/big", "main", map[string]fakehub.File{bigPath: {Data: data, LFS: true}})
	fmt.Println(h.CDN.URL)
	io.Copy(io.Discard, os.Stdin)
}

type cdnProc struct {
	url string
	pid int
}

// startCDNProcess runs TestFakeCDNProcess serving data in a child of this
// test binary; the child ends when the benchmark does.
func startCDNProcess(b *testing.B, data []byte, rate int64) *cdnProc {
	f := filepath.Join(b.TempDir(), "blob")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFakeCDNProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), cdnEnv+"="+f, rateEnv+"="+strconv.FormatInt(rate, 10))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "http://") {
		b.Fatalf("the CDN process said %q: %v", line, err)
	}
	go io.Copy(io.Discard, stdout)
	return &cdnProc{url: strings.TrimSpace(line), pid: cmd.Process.Pid}
}

// cpuMeter reports the CPU time a benchmark's loop took: this process's
// (rllm's, and the CDN's when it runs in this process) as cpu-ms/op, the
// CDN process's as cdn-cpu-ms/op.
type cpuMeter struct {
	self, cdn time.Duration
	p         *cdnProc
}

func startCPU(p *cdnProc) *cpuMeter {
	m := &cpuMeter{p: p, self: selfCPU()}
	if p != nil {
		m.cdn = procCPU(p.pid)
	}
	return m
}

func (m *cpuMeter) report(b *testing.B) {
	if d := selfCPU() - m.self; d > 0 {
		b.ReportMetric(float64(d.Milliseconds())/float64(b.N), "cpu-ms/op")
	}
	if m.p != nil {
		if d := procCPU(m.p.pid) - m.cdn; d > 0 {
			b.ReportMetric(float64(d.Milliseconds())/float64(b.N), "cdn-cpu-ms/op")
		}
	}
}

// The link's speed: a plain GET of the file from the fake CDN to a file,
// as curl would do it.
func BenchmarkLink100MB(b *testing.B) {
	for _, cdn := range cdns {
		b.Run("cdn="+cdn.name, func(b *testing.B) {
			h, size, p := bigHub(b, 100, cdn)
			c := client(h, b.TempDir())
			m, err := c.Head(context.Background(), "o/big", "main", bigPath)
			if err != nil {
				b.Fatal(err)
			}
			out := filepath.Join(b.TempDir(), "f")
			b.SetBytes(size)
			b.ResetTimer()
			cpu := startCPU(p)
			for range b.N {
				resp, err := http.Get(m.Location)
				if err != nil {
					b.Fatal(err)
				}
				f, err := os.Create(out)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(f, resp.Body); err != nil || n != size {
					b.Fatalf("%d bytes: %v", n, err)
				}
				resp.Body.Close()
				f.Close()
			}
			b.StopTimer()
			cpu.report(b)
		})
	}
}

// A first pull's download (HEAD, GET, sha256 check, snapshot link) with
// a progress bar drawn.
func BenchmarkDownload100MB(b *testing.B) {
	for _, cdn := range cdns {
		b.Run("cdn="+cdn.name, func(b *testing.B) {
			h, size, p := bigHub(b, 100, cdn)
			b.SetBytes(size)
			b.ResetTimer()
			cpu := startCPU(p)
			for range b.N {
				b.StopTimer()
				c := client(h, b.TempDir())
				c.Progress = progress.NewText(io.Discard, progress.Options{})
				b.StartTimer()
				if _, _, err := c.Download(context.Background(), "o/big", "main", bigPath); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cpu.report(b)
		})
	}
}

// A second download of a cached file: one HEAD and the ETag check,
// which hashes the blob (hashed: a blob that changed in the last two
// seconds, or any blob off Linux) or reads its stamp (stamped: a blob
// hashed once, at least two seconds after it was written).
func BenchmarkDownloadCached100MB(b *testing.B) {
	for _, stamped := range []bool{false, true} {
		b.Run(map[bool]string{false: "hashed", true: "stamped"}[stamped], func(b *testing.B) {
			h, size, _ := bigHub(b, 100, inProcess)
			c := client(h, b.TempDir())
			t0 := time.Now()
			c.now = func() time.Time { return t0 } // never two seconds later: no stamp
			if _, _, err := c.Download(context.Background(), "o/big", "main", bigPath); err != nil {
				b.Fatal(err)
			}
			if stamped {
				c.now = func() time.Time { return time.Now().Add(time.Minute) }
				if _, _, err := c.Download(context.Background(), "o/big", "main", bigPath); err != nil {
					b.Fatal(err)
				}
			}
			gets := h.CDNGets.Load()
			b.SetBytes(size)
			b.ResetTimer()
			for range b.N {
				if _, _, err := c.Download(context.Background(), "o/big", "main", bigPath); err != nil {
					b.Fatal(err)
				}
			}
			if h.CDNGets.Load() != gets {
				b.Fatal("a cached file was downloaded again")
			}
		})
	}
}

// A whole pull (download, read, field map) of the 100 MB dataset, first
// and cached (some time later: its blob stamped by the pull before).
func BenchmarkPull100MB(b *testing.B) {
	h, size, _ := bigHub(b, 100, inProcess)
	src := Source{Name: "o/big", Repo: "o/big", Fields: FieldMap{"question": "question", "ground_truth": "answer | re:####\\s*(.+)"}}
	for _, cached := range []bool{false, true} {
		name := "first"
		if cached {
			name = "cached"
		}
		b.Run(name, func(b *testing.B) {
			cache := b.TempDir()
			pull := func() error {
				c := client(h, cache)
				if cached {
					c.now = func() time.Time { return time.Now().Add(time.Minute) }
				}
				_, err := c.Pull(context.Background(), src)
				return err
			}
			if cached {
				for range 2 { // the download, then the use that stamps it
					if err := pull(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.SetBytes(size)
			b.ResetTimer()
			for range b.N {
				if !cached {
					b.StopTimer()
					cache = b.TempDir()
					b.StartTimer()
				}
				if err := pull(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
