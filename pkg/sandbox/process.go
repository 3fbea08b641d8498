//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rllm-org/rllm-go/internal/procgroup"
)

// memFile is an in-memory file holding b, read from its start: stdin
// and --file contents are handed over without a host file or a copying
// goroutine.
func memFile(name string, b []byte) (*os.File, error) {
	return newMemFile(name, b)
}

// procRun is one host process that runs a request (bwrap, or the program
// itself for unsafe-host).
type procRun struct {
	argv  []string
	dir   string
	env   []string
	stdin []byte
	// stream, when set, is stdin and stdout as they come (stdin unused).
	stream *Stream
	extra  []*os.File // fds 3, 4, ... in the child
	limits Limits
	// asUser, when set, runs the process with these credentials.
	asUser *syscall.Credential
	// own is how many processes the engine itself keeps in the cgroup
	// besides the program's (bwrap's monitor and its PID 1).
	own int
}

// runProcess starts p, bounds it by its wall time and output limits and
// returns what it gave. The process tree is killed by group when the
// wall time passes, the output overflows or ctx ends.
func runProcess(ctx context.Context, p procRun) (Result, *os.ProcessState, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := procgroup.Command(runCtx, p.argv[0], p.argv[1:]...)
	cmd.Args = p.argv
	cmd.Dir = p.dir
	cmd.Env = p.env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.ExtraFiles = p.extra
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL // rllm killed: its sandboxes die with it
	if p.asUser != nil {
		cmd.SysProcAttr.Credential = p.asUser
	}
	cmd.WaitDelay = time.Second
	var outputHit, wallHit atomic.Bool
	over := func() { outputHit.Store(true); cancel() }
	stdout := &capWriter{limit: p.limits.OutputBytes, over: over}
	stderr := &capWriter{limit: p.limits.OutputBytes, over: over}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	var sp *streamPipes
	var err error
	if p.stream != nil {
		if sp, err = newStreamPipes(cmd, p.stream); err != nil {
			return Result{}, nil, err
		}
		defer sp.close()
	} else {
		in, err := memFile("stdin", p.stdin)
		if err != nil {
			return Result{}, nil, err
		}
		defer in.Close()
		cmd.Stdin = in
	}

	// Memory and processes bound the whole run where a cgroup can be
	// made (else the rlimits alone bound each process; Open said so).
	start := time.Now()
	var cg *Cgroup
	if CgroupsAvailable() == nil {
		c, err := NewCgroup(Limits{MemoryBytes: p.limits.MemoryBytes, Processes: p.limits.Processes}, p.own)
		if err != nil {
			return Result{}, nil, err
		}
		cg = c
		defer cg.Remove()
		err = cg.Start(cmd)
		if err != nil {
			return Result{}, nil, fmt.Errorf("sandbox: start %s: %w", p.argv[0], err)
		}
	} else if err := cmd.Start(); err != nil {
		return Result{}, nil, fmt.Errorf("sandbox: start %s: %w", p.argv[0], err)
	}
	if sp != nil {
		sp.started()
	}
	timer := time.AfterFunc(p.limits.WallTime, func() { wallHit.Store(true); cancel() })
	werr := cmd.Wait()
	timer.Stop()
	if sp != nil {
		sp.wait()
	}
	res := Result{Time: time.Since(start), Stdout: stdout.bytes(), Stderr: stderr.bytes()}
	output := outputHit.Load()
	st := cmd.ProcessState
	var cs CgroupStats
	if cg != nil {
		if cs, err = cg.Stats(); err != nil {
			return res, st, fmt.Errorf("sandbox: reading the run's cgroup: %w", err)
		}
	}
	switch {
	case ctx.Err() != nil:
		return res, st, ctx.Err()
	case cs.OOMKills > 0 && !output:
		// The kernel killed a process of the run for memory (the
		// program's exit status may not show it: a child was killed).
		res.Limit, res.ExitCode = LimitMemory, exitCodeOr(st, 128+int(syscall.SIGKILL))
		return res, st, nil
	case wallHit.Load() && !output:
		res.Limit, res.ExitCode = LimitWallTime, 128+int(syscall.SIGKILL)
		return res, st, nil
	case output:
		res.Limit, res.ExitCode = LimitOutput, 128+int(syscall.SIGKILL)
		return res, st, nil
	}
	if st == nil {
		return res, nil, fmt.Errorf("sandbox: %s: %w", p.argv[0], werr)
	}
	res.ExitCode = exitCode(st)
	if cs.ForkRefusals > 0 && res.ExitCode != 0 {
		// A fork the pids limit refused, and the run failed.
		res.Limit = LimitProcesses
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) && !errors.Is(werr, exec.ErrWaitDelay) {
		return res, st, fmt.Errorf("sandbox: %s: %w", p.argv[0], werr)
	}
	return res, st, nil
}

// streamPipes carry a Stream to and from a process: pipes whose other
// ends the process holds, and a goroutine copying each way.
type streamPipes struct {
	inW, outR     *os.File // ours
	inR, outW     *os.File // the process's, closed once it started
	stream        *Stream
	copied        chan struct{} // closed when stdout's copy ended
	closeOnce     sync.Once
	startedCopies bool
}

func newStreamPipes(cmd *exec.Cmd, s *Stream) (*streamPipes, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	return &streamPipes{inW: inW, outR: outR, inR: inR, outW: outW, stream: s, copied: make(chan struct{})}, nil
}

// started closes the process's ends in this process and starts copying.
func (p *streamPipes) started() {
	p.inR.Close()
	p.outW.Close()
	p.startedCopies = true
	go func() {
		_, _ = io.Copy(p.inW, p.stream.In)
		p.inW.Close()
	}()
	go func() {
		_, _ = io.Copy(p.stream.Out, p.outR)
		close(p.copied)
	}()
}

// wait waits, bounded, for what the process wrote to reach Out: stdout
// ends when the last process holding it does (a sandbox's whole tree
// ends with its PID 1; on the host a descendant may keep it).
func (p *streamPipes) wait() {
	select {
	case <-p.copied:
	case <-time.After(time.Second):
	}
}

// close ends both copies: writing to the process's stdin fails from now
// on, and the stdout copy is stopped.
func (p *streamPipes) close() {
	p.closeOnce.Do(func() {
		p.inW.Close()
		p.outR.Close()
		if !p.startedCopies {
			p.inR.Close()
			p.outW.Close()
		}
	})
}

// exitCode is the shell's view of a process's end: its status, or
// 128+N for signal N.
func exitCode(st *os.ProcessState) int {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// exitCodeOr is st's exit code, or def when the process was not waited.
func exitCodeOr(st *os.ProcessState, def int) int {
	if st == nil {
		return def
	}
	return exitCode(st)
}

// cpuTime is the CPU time of a finished process and its waited-for
// descendants.
func cpuTime(st *os.ProcessState) time.Duration {
	if st == nil {
		return 0
	}
	return st.UserTime() + st.SystemTime()
}
