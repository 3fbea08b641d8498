package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoLines is a program that answers each line of its stdin with the
// line and its number, then, at the end of its stdin, writes more than
// the small limits' output cap and exits 3.
const echoLines = `import sys
n = 0
for line in sys.stdin:
    n += 1
    sys.stdout.write("%d %s" % (n, line))
    sys.stdout.flush()
sys.stdout.write("x" * (200 << 10) + "\n")
sys.exit(3)
`

// TestStream: a run's stdin and stdout as a conversation, on every
// backend: each answer comes before the next line is sent, the end of
// the input ends the program, its output is not cut at OutputBytes, and
// the result keeps its exit status and stderr.
func TestStream(t *testing.T) {
	needPython(t)
	for _, name := range []string{BackendBwrap, BackendDocker, BackendUnsafeHost} {
		t.Run(name, func(t *testing.T) {
			b := backendFor(t, name)
			inR, inW := io.Pipe()
			outR, outW := io.Pipe()
			type ended struct {
				res Result
				err error
			}
			done := make(chan ended, 1)
			go func() {
				req := py(echoLines)
				req.Limits = small
				req.Stream = &Stream{In: inR, Out: outW}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				res, err := b.Run(ctx, req)
				outW.Close()
				inR.Close()
				done <- ended{res, err}
			}()
			br := bufio.NewReader(outR)
			for i := 1; i <= 3; i++ {
				if _, err := fmt.Fprintf(inW, "line %d\n", i); err != nil {
					t.Fatal(err)
				}
				got, err := br.ReadString('\n')
				if want := fmt.Sprintf("%d line %d\n", i, i); err != nil || got != want {
					t.Fatalf("answer %q (%v), want %q", got, err, want)
				}
			}
			inW.Close()
			rest, _ := io.ReadAll(br)
			e := <-done
			if e.err != nil {
				t.Fatal(e.err)
			}
			if len(rest) != 200<<10+1 || strings.Trim(string(rest), "x\n") != "" {
				t.Errorf("the output after the conversation: %d bytes, want %d", len(rest), 200<<10+1)
			}
			if e.res.ExitCode != 3 || e.res.Limit != LimitNone || len(e.res.Stdout) != 0 {
				t.Errorf("result %+v, want exit 3, no limit, no kept stdout", e.res)
			}
		})
	}
}

// TestPoolTogether: runs that need each other running (each answers the
// other) finish when they take their slots together, even with more
// pairs than the pool has slots; a pool of one runs a pair on its one
// slot.
func TestPoolTogether(t *testing.T) {
	needPython(t)
	b := backendFor(t, BackendBwrap)
	// ping sends a line and waits for one back, five times; pong answers.
	ping := py("import sys\nfor i in range(5):\n    print(i, flush=True)\n    assert sys.stdin.readline() == '%d\\n' % i\n")
	pong := py("import sys\nfor line in sys.stdin:\n    print(line, end='', flush=True)\n")
	for _, size := range []int{1, 2} {
		t.Run(fmt.Sprintf("pool=%d", size), func(t *testing.T) {
			p := NewPool(b, size, small)
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					err := p.Together(ctx, 2, func(r Runner) error {
						aR, aW := io.Pipe() // ping's stdout, pong's stdin
						bR, bW := io.Pipe() // pong's stdout, ping's stdin
						errs := make(chan error, 2)
						for _, x := range []struct {
							req     Request
							in      *io.PipeReader
							out, to *io.PipeWriter
						}{{ping, bR, aW, bW}, {pong, aR, bW, aW}} {
							go func() {
								req := x.req
								req.Stream = &Stream{In: x.in, Out: x.out}
								res, err := r.Run(ctx, req)
								x.out.Close()
								if err == nil && !res.OK() {
									err = fmt.Errorf("%s", res.Reason())
								}
								errs <- err
							}()
						}
						for range 2 {
							if err := <-errs; err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
		})
	}
}
